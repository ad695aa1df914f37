-- Minimal user config for the tests: the plugin on the runtimepath (plugin/forge.lua is
-- then sourced like any installed plugin) and a statusline using the component.
local plugin = assert(os.getenv('FORGE_NVIM_PLUGIN'), 'FORGE_NVIM_PLUGIN is not set')
vim.opt.runtimepath:prepend(plugin)
vim.opt.swapfile = false
vim.o.statusline = '%f %m%=%{v:lua.require("forge").statusline()} %l:%c'

local opts = {}
local agent = os.getenv('FORGE_TEST_AGENT')
if agent then
  -- The sandbox is not what these tests are about, and with the data directory under /tmp
  -- a sandboxed agent (private /tmp) could not reach FORGE_USAGE_FILE.
  opts.config = {
    agent = { command = { agent, '{session}' } },
    sandbox = { enabled = false },
  }
end
if os.getenv('FORGE_TEST_CMD') then
  opts.cmd = vim.split(os.getenv('FORGE_TEST_CMD'), ' ', { trimempty = true })
end
if os.getenv('FORGE_TEST_LEGACY') == '1' then
  -- Exercise the Neovim 0.10 code path (vim.lsp.start from autocommands) on 0.11.
  require('forge.util').has_011 = false
end
require('forge').setup(opts)
