-- Neovim opened while a loop runs in another forge-lsp server (a `serve --listen` started
-- by the test, the loop started with `forge-lsp call execute-plan`): the running loop is
-- shown at once (status replayed after initialize, statusline, work-done progress), with no
-- "loop ended" notice for it; when it ends in that other server, Neovim is told once.
-- Environment: FORGE_TEST_OUT, FORGE_TEST_REPO (cwd), FORGE_TEST_HOLD (the agent waits while
-- it exists), FORGE_TEST_LOOP (the loop's name).
local H = dofile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'test', 'helpers.lua'))
local check, wait, note = H.check, H.wait, H.note

local forge = require('forge')
local hold = assert(os.getenv('FORGE_TEST_HOLD'))
local name = assert(os.getenv('FORGE_TEST_LOOP'))
local LOOP_WAIT = tonumber(os.getenv('FORGE_TEST_LOOP_WAIT') or '15000')

local progress = {}
vim.api.nvim_create_autocmd('LspProgress', {
  callback = function(ev)
    local p = ev.data and ev.data.params or {}
    local v = p.value or {}
    table.insert(progress, { kind = v.kind, title = v.title, message = v.message })
  end,
})
local statuslines = {}
vim.api.nvim_create_autocmd('User', {
  pattern = 'ForgeLoopStatus',
  callback = function()
    table.insert(statuslines, forge.statusline())
  end,
})

local function ended_notices()
  return H.messages_matching('Forge: loop ' .. vim.pesc(name) .. ' ')
end

H.run(function()
  if not H.open_in_project('notes.txt') then
    os.remove(hold)
    return
  end

  local shown = wait(5000, function()
    local l = forge.loops()[name]
    return l and l.status == 'running'
  end)
  note('loop_on_open', forge.loops()[name])
  check('the loop another server runs is known at once (forge/loopStatus replayed after initialize)', shown, forge.loops())
  wait(2000, function()
    return forge.statusline():find('Forge: ' .. name, 1, true) ~= nil
  end)
  check('the statusline component shows it', forge.statusline():find('Forge: ' .. name, 1, true) ~= nil, forge.statusline())
  wait(3000, function()
    return vim.iter(progress):any(function(p)
      return p.kind == 'begin' and p.title == 'Forge: ' .. name
    end)
  end)
  check('work-done progress begins for it (LspProgress begin)', vim.iter(progress):any(function(p)
    return p.kind == 'begin' and p.title == 'Forge: ' .. name
  end), progress)
  vim.wait(300)
  check('no "loop ended" notice for a loop that is running', #ended_notices() == 0, ended_notices())

  local ended, l = H.release_and_wait_end(name, hold, LOOP_WAIT)
  check('its end in the other server reaches Neovim (forge/loopStatus completed)', ended and l.status == 'completed', l)
  wait(2000, function()
    return #ended_notices() > 0
  end)
  vim.wait(300)
  local notices = vim.tbl_map(function(m)
    return m.msg
  end, ended_notices())
  note('notices', notices)
  check('vim.notify tells it completed, once', #notices == 1 and notices[1]:find('completed', 1, true) ~= nil, notices)
  wait(2000, function()
    return forge.statusline() == ''
  end)
  check('the statusline component is empty once it ended', forge.statusline() == '', { now = forge.statusline(), seen = statuslines })
  check('work-done progress ends', vim.iter(progress):any(function(p)
    return p.kind == 'end'
  end), progress)
end)
