-- setup({ name = ... }) after the plugin configured the default name (lazy.nvim's order),
-- with a file already open: one server per buffer, under the new name, and one diagnostic
-- per finding; twice over with another name. Run on Neovim 0.11's path and on the 0.10 one
-- (FORGE_TEST_LEGACY=1: vim.lsp.start from autocommands), where a review found both
-- clients kept.
-- Environment: FORGE_TEST_OUT, FORGE_TEST_REPO (cwd; notes.txt has one finding).
-- As lazy.nvim's VeryLazy does: after startup (VimEnter), when clients start for the
-- buffers already open.
if vim.v.vim_did_enter == 0 then
  local me = debug.getinfo(1, 'S').source:sub(2)
  vim.api.nvim_create_autocmd('VimEnter', {
    once = true,
    nested = true,
    callback = function()
      vim.schedule(function()
        dofile(me)
      end)
    end,
  })
  return
end
local H = dofile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'test', 'helpers.lua'))
local check, wait = H.check, H.wait
local forge = require('forge')

local function by_name()
  local n = {}
  for _, c in ipairs(vim.lsp.get_clients({ bufnr = 0 })) do
    if not require('forge.util').is_stopped(c) then
      n[c.name] = (n[c.name] or 0) + 1
    end
  end
  return n
end

H.run(function()
  if not H.open_in_project('notes.txt') then
    return
  end
  wait(10000, function()
    return #vim.diagnostic.get(0) > 0
  end)
  for _, name in ipairs({ 'forge_renamed', 'forge_again' }) do
    forge.setup({ name = name })
    wait(10000, function()
      local c = forge.client(0)
      return c and c.name == name and c.initialized and by_name()[name] == 1
    end)
    wait(3000, function()
      return #vim.diagnostic.get(0) == 1 and vim.tbl_count(by_name()) == 1
    end)
    local seen = by_name()
    check(('setup({ name = %q }): one client, the new name\'s, one diagnostic'):format(name),
      seen[name] == 1 and vim.tbl_count(seen) == 1 and #vim.diagnostic.get(0) == 1,
      { clients = seen, diagnostics = #vim.diagnostic.get(0) })
  end
end)
