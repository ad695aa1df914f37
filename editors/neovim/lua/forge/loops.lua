-- Loop status: the `forge/loopStatus` notification kept in a table, a statusline
-- component, and vim.notify when a loop ends. Work-done progress ($/progress) is left to
-- Neovim's own handlers (vim.lsp.status(), LspProgress).
local util = require('forge.util')
local options = require('forge.config')

local M = {}

--- loop name -> the last forge/loopStatus params, plus `client_id`, `root`, `updated`.
M.loops = {}

local TERMINAL = { completed = true, cancelled = true, errored = true, stalled = true }

-- Loop ends we announced ourselves (name -> epoch ms), so the server's own
-- window/showMessage for the same end is not shown twice, and the other way round.
local announced = {}
local shown_by_server = {}
local DEDUPE_MS = 10000

local started_at = util.epoch_ms()

local function end_message(s)
  if s.status == 'completed' then
    return ('Forge: loop %s completed.'):format(s.loopName), vim.log.levels.INFO
  elseif s.status == 'cancelled' then
    return ('Forge: loop %s was cancelled.'):format(s.loopName), vim.log.levels.INFO
  end
  local reason = s.terminationReason
  if reason == nil or reason == vim.NIL or reason == '' then
    reason = 'unknown reason'
  end
  return ('Forge: loop %s %s: %s.'):format(s.loopName, s.status, reason), vim.log.levels.WARN
end

local function num(v)
  return type(v) == 'number' and v or nil
end

--- Whether a status update is the end of a loop this Neovim saw running (or that ended
--- after Neovim started): the initial announcement of old ended loops is not news.
local function is_new_end(prev, s)
  if not TERMINAL[s.status] then
    return false
  end
  if prev then
    return prev.status ~= s.status or num(prev.completedAt) ~= num(s.completedAt)
  end
  local at = num(s.completedAt)
  return at ~= nil and at >= started_at - 5000
end

local function redraw()
  pcall(vim.cmd, 'redrawstatus!')
end

--- Handler of `forge/loopStatus`.
function M.on_status(_, s, ctx)
  if type(s) ~= 'table' or type(s.loopName) ~= 'string' then
    return
  end
  local prev = M.loops[s.loopName]
  local entry = vim.deepcopy(s)
  entry.client_id = ctx and ctx.client_id
  entry.updated = util.epoch_ms()
  local client = ctx and ctx.client_id and vim.lsp.get_client_by_id(ctx.client_id)
  entry.root = client and client.root_dir or nil
  M.loops[s.loopName] = entry
  if is_new_end(prev, s) and options.get().notify_loop_end then
    local now = util.epoch_ms()
    local by_server = shown_by_server[s.loopName]
    if not (by_server and now - by_server < DEDUPE_MS) then
      announced[s.loopName] = now
      local msg, level = end_message(s)
      vim.schedule(function()
        vim.notify(msg, level, { title = 'forge' })
      end)
    end
  end
  vim.schedule(function()
    pcall(vim.api.nvim_exec_autocmds, 'User', { pattern = 'ForgeLoopStatus', data = entry })
    redraw()
  end)
end

--- Handler of `window/showMessage`: the server's loop-end message is dropped when this
--- plugin already said the same; everything else goes to Neovim's handler.
function M.on_show_message(err, params, ctx, cfg)
  local msg = type(params) == 'table' and params.message or nil
  local name = type(msg) == 'string' and msg:match('^Forge: loop (%S+) ') or nil
  if name then
    local now = util.epoch_ms()
    local ours = announced[name]
    if ours and now - ours < DEDUPE_MS then
      return vim.NIL
    end
    shown_by_server[name] = now
  end
  local default = vim.lsp.handlers['window/showMessage']
  if default then
    return default(err, params, ctx, cfg)
  end
  return vim.NIL
end

--- Brings the table in line with a `forge.loop-status` list of a client's project: loops
--- the server does not know are dropped (a start that failed after announcing `running`),
--- the others take the listed status.
function M.reconcile(client_id, list)
  local listed = {}
  for _, l in ipairs(list or {}) do
    listed[l.loopName] = l
  end
  for name, entry in pairs(M.loops) do
    if entry.client_id == client_id then
      local l = listed[name]
      if not l then
        M.loops[name] = nil
      elseif num(l.startedAt) == num(entry.startedAt) then
        -- Of the same run only: a list read before a restart must not mark the restarted
        -- loop stopped (a restart gives a new `startedAt`; a review).
        entry.serverGone = num(l.serverGone)
      end
      if l and l.status ~= entry.status then
        for _, k in ipairs({ 'status', 'phase', 'iteration', 'sectionIndex', 'totalSections', 'terminationReason', 'completedAt' }) do
          entry[k] = l[k]
        end
      end
    end
  end
  redraw()
end

--- Asks the server for its loops and reconciles the table with them.
function M.sync(client)
  require('forge.client').exec(client, 'forge.loop-status', nil, function(err, res)
    if not err then
      M.reconcile(client.id, vim.tbl_get(res or {}, 'data', 'loops'))
    end
  end)
end

--- Drops the loops a stopped client reported.
function M.forget_client(client_id)
  for name, l in pairs(M.loops) do
    if l.client_id == client_id then
      M.loops[name] = nil
    end
  end
  redraw()
end

--- The loop table (name -> status), a copy.
function M.get()
  return vim.deepcopy(M.loops)
end

--- Loop names, running ones first, for completion.
function M.names()
  local names = {}
  for name, _ in pairs(M.loops) do
    names[#names + 1] = name
  end
  table.sort(names, function(a, b)
    local ra, rb = M.loops[a].status == 'running', M.loops[b].status == 'running'
    if ra ~= rb then
      return ra
    end
    return a < b
  end)
  return names
end

--- One loop as short text: `add-oauth 2/4 auditing #3`.
function M.format(l)
  local parts = { l.loopName }
  if num(l.sectionIndex) and num(l.totalSections) and l.totalSections > 0 then
    parts[#parts + 1] = ('%d/%d'):format(l.sectionIndex + 1, l.totalSections)
  end
  if l.status == 'running' and num(l.serverGone) then
    -- Recorded as running, but its server ended (`serverGone`): nothing runs it.
    parts[#parts + 1] = 'server stopped'
  elseif l.status == 'running' then
    parts[#parts + 1] = l.phase
    if num(l.iteration) then
      parts[#parts + 1] = '#' .. l.iteration
    end
  else
    parts[#parts + 1] = l.status
  end
  return table.concat(parts, ' ')
end

--- Statusline component: the running loops, e.g. `Forge: add-oauth 2/4 auditing #3`;
--- an empty string when no loop runs.
function M.statusline()
  local fmt = options.get().statusline_format or M.format
  local items = {}
  for _, name in ipairs(M.names()) do
    local l = M.loops[name]
    if l.status == 'running' then
      items[#items + 1] = fmt(l)
    end
  end
  if #items == 0 then
    return ''
  end
  -- `%` is special in 'statusline'.
  return (('Forge: ' .. table.concat(items, ' | ')):gsub('%%', '%%%%'))
end

return M
