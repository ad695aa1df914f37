//! Review findings (filled by the findings work).
