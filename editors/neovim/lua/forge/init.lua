-- forge.nvim: Neovim integration of forge-lsp (plans, review findings and loops).
--
--   require('forge').setup({ cmd = { 'forge-lsp' } })   -- optional; see :help forge
--   vim.o.statusline = '%f %m%=%{v:lua.require("forge").statusline()} %l:%c'
local M = {}

local initialized = false

--- Registers the :Forge command, the forge:// handlers and automatic start. Called by
--- plugin/forge.lua; safe to call again.
function M.init()
  if initialized then
    return
  end
  initialized = true
  require('forge.commands').setup()
  require('forge.documents').setup()
  require('forge.client').setup()
end

--- Sets options (see :help forge-options) and (re)configures the client.
---@param opts? table
function M.setup(opts)
  require('forge.config').set(opts)
  if initialized then
    require('forge.client').setup()
  else
    M.init()
  end
end

--- Statusline component: the running loops (`Forge: add-oauth 2/4 auditing #3`), or ''.
function M.statusline()
  return require('forge.loops').statusline()
end

--- The loops seen through forge/loopStatus: name -> status table.
function M.loops()
  return require('forge.loops').get()
end

--- The forge-lsp client of a buffer (default: the current one), or nil.
function M.client(bufnr)
  return require('forge.client').for_buf(bufnr or 0)
end

--- Runs `forge.<tool>` with an input table; cb(err, result) receives { text, data }.
function M.exec(tool, input, cb)
  local client = require('forge.client').ensure(0)
  if not client then
    return
  end
  local command = tool:match('^forge%.') and tool or ('forge.' .. tool)
  require('forge.client').exec(client, command, input, cb or function(err, res)
    if err then
      require('forge.util').error(command .. ': ' .. require('forge.util').error_text(err))
    elseif res and res.text then
      require('forge.util').notify(res.text)
    end
  end)
end

return M
