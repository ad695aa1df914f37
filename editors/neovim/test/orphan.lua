-- Neovim opened after the server that ran a loop was killed: the loop is still recorded as
-- running, but nothing runs it. The replayed forge/loopStatus says so (`serverGone`), the
-- statusline shows it stopped rather than running, and no work-done progress begins for it.
-- Environment: FORGE_TEST_OUT, FORGE_TEST_REPO (cwd), FORGE_TEST_LOOP (the loop's name).
local H = dofile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'test', 'helpers.lua'))
local check, wait = H.check, H.wait

local forge = require('forge')
local name = assert(os.getenv('FORGE_TEST_LOOP'))

local progress = {}
vim.api.nvim_create_autocmd('LspProgress', {
  callback = function(ev)
    local v = (ev.data and ev.data.params or {}).value or {}
    table.insert(progress, { kind = v.kind, title = v.title })
  end,
})

H.run(function()
  if not H.open_in_project('notes.txt') then
    return
  end
  local known = wait(5000, function()
    local l = forge.loops()[name]
    return l and type(l.serverGone) == 'number'
  end)
  check('the loop of a killed server is replayed with serverGone', known, forge.loops()[name])
  wait(2000, function()
    return forge.statusline():find('server stopped', 1, true) ~= nil
  end)
  check('the statusline shows it stopped, not running', forge.statusline():find(name .. ' server stopped', 1, true) ~= nil, forge.statusline())
  -- Neovim echoes a server's warning into :messages (not vim.notify).
  local function told()
    return vim.fn.execute('messages'):find('recorded as running', 1, true) ~= nil
  end
  wait(3000, told)
  check('the user is told nothing runs it (:messages)', told(), vim.fn.execute('messages'))
  vim.wait(300)
  check('no work-done progress begins for it', not vim.iter(progress):any(function(p)
    return p.kind == 'begin' and p.title == 'Forge: ' .. name
  end), progress)
end)
