-- Test helpers: checks recorded to a JSON file, captured notifications, bounded waits.
local H = {}

H.checks = {}
H.notes = {}
H.messages = {}

local out = assert(os.getenv('FORGE_TEST_OUT'), 'FORGE_TEST_OUT is not set')

-- Capture vim.notify (the plugin's and Neovim's own) and keep printing it to stderr.
H.notify = function(msg, level, _)
  local m = { msg = tostring(msg), level = level or vim.log.levels.INFO }
  table.insert(H.messages, m)
  io.stderr:write(('[notify %s] %s\n'):format(m.level, m.msg))
end
vim.notify = H.notify

function H.check(name, ok, detail)
  ok = ok and true or false
  table.insert(H.checks, { name = name, ok = ok, detail = detail ~= nil and vim.inspect(detail) or nil })
  io.stderr:write(('%s  %s%s\n'):format(ok and 'PASS' or 'FAIL', name, (not ok and detail ~= nil) and ('  -- ' .. vim.inspect(detail)) or ''))
  return ok
end

--- Records what the test saw (written to the JSON result).
function H.note(key, value)
  H.notes[key] = value
end

function H.wait(ms, fn)
  return vim.wait(ms, function()
    local ok, v = pcall(fn)
    return ok and v and true or false
  end, 20)
end

--- Messages (captured notifications) matching a Lua pattern.
function H.messages_matching(pat)
  local r = {}
  for _, m in ipairs(H.messages) do
    if m.msg:find(pat) then
      r[#r + 1] = m
    end
  end
  return r
end

function H.forge_diagnostics(bufnr)
  return vim.tbl_filter(function(d)
    return d.source == 'forge'
  end, vim.diagnostic.get(bufnr))
end

function H.buf_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n')
end

function H.finish(err)
  if err then
    H.check('scenario ran to the end', false, err)
  end
  local failed = 0
  for _, c in ipairs(H.checks) do
    if not c.ok then
      failed = failed + 1
    end
  end
  local f = assert(io.open(out, 'w'))
  f:write(vim.json.encode({
    checks = H.checks,
    notes = next(H.notes) and H.notes or vim.empty_dict(),
    messages = H.messages,
  }))
  f:close()
  return failed
end

--- Edits `file` (relative to the cwd) and waits until the project's forge client has
--- initialized; records the check. Returns the buffer, or nil when the client did not start.
function H.open_in_project(file)
  vim.cmd('edit ' .. vim.fn.fnameescape(file))
  local buf = vim.api.nvim_get_current_buf()
  local forge = require('forge')
  local started = H.wait(10000, function()
    local c = forge.client(buf)
    return c and c.initialized
  end)
  H.check('forge-lsp starts for the project', started, nil)
  return started and buf or nil
end

--- Writes `lines` as this session's plan (`:Forge plan`, `:w`), then starts it with
--- `:Forge execute` while the file `hold` exists (the test's agent waits on it) and waits
--- until the loop `name` runs; records the check `what`. Returns whether it runs (the hold
--- file is removed when it does not).
function H.execute_held(lines, name, hold, what)
  vim.cmd('Forge plan')
  vim.api.nvim_buf_set_lines(vim.api.nvim_get_current_buf(), 0, -1, false, lines)
  vim.cmd('write')
  H.wait(2000, function()
    return #H.messages_matching('Plan stored') > 0
  end)
  assert(io.open(hold, 'w')):close()
  vim.cmd('Forge execute')
  local forge = require('forge')
  local running = H.wait(10000, function()
    local l = forge.loops()[name]
    return l and l.status == 'running'
  end)
  H.check(what, running, forge.loops())
  if not running then
    os.remove(hold)
  end
  return running
end

--- Lets the test's agent go (removes `hold`) and waits at most `ms` until the loop `name`
--- no longer runs. Returns whether it ended, and its last status (a table, maybe empty).
function H.release_and_wait_end(name, hold, ms)
  os.remove(hold)
  local forge = require('forge')
  local ended = H.wait(ms, function()
    local l = forge.loops()[name]
    return l and l.status ~= 'running'
  end)
  return ended, forge.loops()[name] or {}
end

--- Runs a scenario function, writes the result and quits with 0 (all passed) or 1.
function H.run(fn)
  local ok, err = xpcall(fn, debug.traceback)
  local failed = H.finish(not ok and err or nil)
  vim.cmd((failed == 0) and 'qall!' or 'cquit 1')
end

return H
