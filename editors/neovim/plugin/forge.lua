-- forge.nvim: starts forge-lsp for git projects, opens forge:// documents, :Forge.
if vim.g.loaded_forge_lsp then
  return
end
vim.g.loaded_forge_lsp = true

if vim.fn.has('nvim-0.10') == 0 then
  vim.notify('forge: Neovim 0.10 or newer is required', vim.log.levels.ERROR)
  return
end

require('forge').init()
