-- :checkhealth forge
local M = {}

function M.check()
  local health = vim.health
  health.start('forge')
  if vim.fn.has('nvim-0.10') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.10 or newer is required')
  end
  local cmd = require('forge.config').cmd()
  if vim.fn.executable(cmd[1]) == 1 then
    local out = vim.system({ cmd[1], '--version' }, { text = true }):wait(5000)
    health.ok(('server: %s (%s)'):format(vim.fn.exepath(cmd[1]), vim.trim(out.stdout or '')))
  else
    health.error(("server command '%s' is not executable"):format(cmd[1]), {
      "install forge-lsp on PATH or set require('forge').setup({ cmd = { '/path/to/forge-lsp' } })",
    })
  end
  if vim.fn.executable('git') == 1 then
    health.ok('git found')
  else
    health.error('git not found')
  end
  local root = require('forge.client').cwd_root()
  if root then
    health.info('project (working directory): ' .. root)
  else
    health.info('the working directory is not inside a git repository')
  end
  for _, c in ipairs(require('forge.client').clients()) do
    health.info(('client %d: root %s, session %s'):format(c.id, tostring(c.root_dir), tostring(require('forge.client').session_id(c))))
  end
end

return M
