-- Options: defaults, then `vim.g.forge_lsp` (a table), then `require('forge').setup(opts)`.
local M = {}

M.defaults = {
  -- The server command: a list (argv) or a string (the program). `forge-lsp` on PATH by
  -- default.
  cmd = { 'forge-lsp' },
  -- Extra environment variables for the server process.
  cmd_env = nil,
  -- Data directory (initializationOptions.forge.dataDir); nil = the server's default
  -- (FORGE_DATA_DIR, $XDG_DATA_HOME/forge-lsp, ~/.local/share/forge-lsp).
  data_dir = nil,
  -- Configuration overrides (initializationOptions.forge.config), same keys as
  -- .forge/config.toml, e.g. { loop = { defaultMaxIterations = 5 } }.
  config = nil,
  -- Start the server for files inside a git repository automatically.
  autostart = true,
  -- Reuse the same Forge session per project across Neovim restarts, so `:Forge plan`
  -- opens the plan you wrote last time.
  persist_session = true,
  -- vim.notify when a loop ends (completed, cancelled, errored, stalled).
  notify_loop_end = true,
  -- Show code lenses (Execute plan, section status) in forge:// plan buffers.
  codelens = true,
  -- Open the quickfix window after :Forge findings / plans / loops.
  open_quickfix = true,
  -- Timeout of the synchronous requests (reading and saving forge:// documents).
  timeout_ms = 5000,
  -- Statusline: a function(loop) -> string for one running loop; nil = the default.
  statusline_format = nil,
  -- The vim.lsp.config name of the client.
  name = 'forge_lsp',
}

M.user = {}

--- The effective options.
function M.get()
  local g = vim.g.forge_lsp
  local opts = vim.tbl_deep_extend('force', {}, M.defaults, type(g) == 'table' and g or {}, M.user)
  -- Lists replace lists (tbl_deep_extend would merge `cmd` element-wise).
  for _, src in ipairs({ type(g) == 'table' and g or {}, M.user }) do
    if src.cmd ~= nil then
      opts.cmd = src.cmd
    end
  end
  return opts
end

--- Replaces the options given to setup() (each call starts again from the defaults and
--- vim.g.forge_lsp).
function M.set(opts)
  M.user = vim.deepcopy(opts or {})
end

--- The server argv.
function M.cmd()
  local cmd = M.get().cmd
  if type(cmd) == 'string' then
    return { cmd }
  end
  if type(cmd) ~= 'table' or #cmd == 0 then
    return { 'forge-lsp' }
  end
  return vim.list_extend({}, cmd)
end

return M
