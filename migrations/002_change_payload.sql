-- A change-feed entry may carry a snapshot taken in the writing transaction (for loops: the
-- forge/loopStatus params at that change), so every announcement reflects its own change.
ALTER TABLE changes ADD COLUMN payload TEXT;
