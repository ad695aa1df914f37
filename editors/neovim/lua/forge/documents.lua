-- `forge://` documents in buffers: read with the LSP 3.18 request
-- `workspace/textDocumentContent`, re-read on `workspace/textDocumentContent/refresh`,
-- attached to the client that served them (never a second server). Session plans
-- (`forge://plan/session/<id>.md`) are editable and saved with `forge.plan-write`; every
-- other document is read-only.
local util = require('forge.util')
local clients = require('forge.client')
local options = require('forge.config')

local M = {}

--- The session id of a session plan URI, else nil.
function M.session_plan_id(uri)
  return uri:match('^forge://plan/session/(.+)%.md$')
end

function M.session_plan_uri(sid)
  return ('forge://plan/session/%s.md'):format(sid)
end

local function set_lines(bufnr, lines)
  local modifiable, readonly = vim.bo[bufnr].modifiable, vim.bo[bufnr].readonly
  vim.bo[bufnr].modifiable = true
  vim.bo[bufnr].readonly = false
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.bo[bufnr].modifiable = modifiable
  vim.bo[bufnr].readonly = readonly
  vim.bo[bufnr].modified = false
end

local function setup_buffer(bufnr, uri, editable)
  vim.bo[bufnr].buftype = 'acwrite'
  vim.bo[bufnr].swapfile = false
  vim.bo[bufnr].modifiable = editable
  vim.bo[bufnr].readonly = not editable
  vim.bo[bufnr].modified = false
  local ft = vim.filetype.match({ filename = uri, buf = bufnr }) or (uri:match('%.md$') and 'markdown') or nil
  if ft and vim.bo[bufnr].filetype ~= ft then
    vim.bo[bufnr].filetype = ft
  end
end

-- Lens requests in flight, by "<bufnr>:<client id>": { again = true } once another
-- refresh came while one was in flight.
local lens_requests = {}

--- Asks for the buffer's code lenses again (when enabled and the server has them). Neovim
--- asks only when told to: it does not declare `workspace/codeLens/refresh`, so a loop
--- plan's section statuses would stay as they were when the buffer was opened. Not
--- `vim.lsp.codelens.refresh`: it drops a refresh while one is in flight, so the last
--- change of a loop could be shown with the lenses of the one before; here a refresh that
--- comes meanwhile asks once more when the answer is in.
local function refresh_lenses(client, bufnr)
  if not (options.get().codelens and vim.tbl_get(client.server_capabilities or {}, 'codeLensProvider')) then
    return
  end
  local key = bufnr .. ':' .. client.id
  if lens_requests[key] then
    lens_requests[key].again = true
    return
  end
  lens_requests[key] = { again = false }
  vim.schedule(function()
    if not (vim.api.nvim_buf_is_valid(bufnr) and client.attached_buffers[bufnr]) or util.is_stopped(client) then
      lens_requests[key] = nil
      return
    end
    local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) } }
    local sent = util.request(client, 'textDocument/codeLens', params, function(err, result, ctx)
      if vim.api.nvim_buf_is_valid(bufnr) then
        pcall(vim.lsp.codelens.on_codelens, err, result, ctx)
      end
      local again = lens_requests[key] and lens_requests[key].again
      lens_requests[key] = nil
      if again then
        refresh_lenses(client, bufnr)
      end
    end, bufnr)
    if not sent then
      lens_requests[key] = nil
    end
  end)
end

local function attach(client, bufnr)
  vim.b[bufnr].forge_client = client.id
  if not client.attached_buffers[bufnr] then
    vim.lsp.buf_attach_client(bufnr, client.id)
  end
  refresh_lenses(client, bufnr)
end

--- BufReadCmd forge://*: fills the buffer with the document.
function M.read(bufnr, uri)
  local editable = M.session_plan_id(uri) ~= nil
  vim.b[bufnr].forge_uri = uri
  local client = clients.ensure(bufnr)
  if not client then
    set_lines(bufnr, {})
    setup_buffer(bufnr, uri, false)
    return
  end
  local result, err = util.request_sync(client, 'workspace/textDocumentContent', { uri = uri }, options.get().timeout_ms)
  if err then
    set_lines(bufnr, {})
    if editable and type(err) == 'table' and err.code == 1002 then
      -- No plan yet: an empty plan the user writes and saves with :w.
      vim.b[bufnr].forge_eol = true
      setup_buffer(bufnr, uri, true)
      util.notify('no plan is stored for this session yet: write it here and :w to store it.')
    else
      setup_buffer(bufnr, uri, false)
      util.error(('cannot open %s: %s'):format(uri, util.error_text(err)))
      return
    end
  else
    local text = (result and result.text) or ''
    vim.b[bufnr].forge_eol = text == '' or text:sub(-1) == '\n'
    set_lines(bufnr, util.split_lines(text))
    setup_buffer(bufnr, uri, editable)
  end
  attach(client, bufnr)
end

--- BufWriteCmd forge://*: saves a session plan with forge.plan-write.
function M.write(bufnr, uri)
  local sid = M.session_plan_id(uri)
  if not sid then
    util.error(uri .. ' is read-only: only session plans (forge://plan/session/<id>.md) can be saved.')
    return false
  end
  local client = clients.ensure(bufnr)
  if not client then
    return false
  end
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local text = table.concat(lines, '\n')
  if vim.b[bufnr].forge_eol ~= false and text ~= '' then
    text = text .. '\n'
  end
  local result, err = clients.exec_sync(client, 'forge.plan-write', { content = text, session_id = sid })
  if err then
    util.error('saving the plan failed: ' .. util.error_text(err))
    return false
  end
  if vim.api.nvim_buf_get_name(bufnr) == uri then
    vim.bo[bufnr].modified = false
  end
  -- The first line of the reply (`Plan stored: N lines, M chars.`); the structure
  -- warnings are diagnostics on the plan buffer.
  local text = (result and result.text) or 'Plan stored.'
  local summary = text:match('^[^\n]*')
  local warnings = #(vim.tbl_get(result or {}, 'data', 'warnings') or {})
  if warnings > 0 then
    summary = summary .. (' %d structure warning%s (see the diagnostics).'):format(warnings, warnings == 1 and '' or 's')
  end
  util.notify(summary)
  pcall(vim.api.nvim_exec_autocmds, 'User', { pattern = 'ForgePlanWritten', data = { uri = uri, result = result } })
  return true
end

--- Re-reads one loaded forge:// buffer asynchronously (kept as is when modified).
function M.reload(bufnr)
  local uri = vim.api.nvim_buf_get_name(bufnr)
  local client = vim.b[bufnr].forge_client and vim.lsp.get_client_by_id(vim.b[bufnr].forge_client)
    or clients.for_buf(bufnr)
  if not client then
    return
  end
  util.request(client, 'workspace/textDocumentContent', { uri = uri }, function(err, result)
    if err or not result or not vim.api.nvim_buf_is_loaded(bufnr) then
      return
    end
    if vim.bo[bufnr].modified then
      util.warn(uri .. ' changed on the server; your buffer has unsaved edits (:e! loads the new text).')
      return
    end
    local lines = util.split_lines(result.text or '')
    local old = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
    if not vim.deep_equal(lines, old) then
      local cursors = {}
      for _, win in ipairs(vim.fn.win_findbuf(bufnr)) do
        cursors[win] = vim.api.nvim_win_get_cursor(win)
      end
      set_lines(bufnr, lines)
      for win, pos in pairs(cursors) do
        local row = math.min(pos[1], vim.api.nvim_buf_line_count(bufnr))
        pcall(vim.api.nvim_win_set_cursor, win, { row, pos[2] })
      end
    end
    -- The server's refresh of a document is also its word that what the document's lenses
    -- show changed (a loop plan's text never does; its section statuses do).
    refresh_lenses(client, bufnr)
    pcall(vim.api.nvim_exec_autocmds, 'User', { pattern = 'ForgeDocumentRefreshed', data = { uri = uri } })
  end)
end

--- Re-reads the loaded buffers of a URI (every forge:// buffer when uri is nil).
function M.refresh(uri)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(b) then
      local name = vim.api.nvim_buf_get_name(b)
      if util.is_forge_uri(name) and (uri == nil or name == uri) then
        M.reload(b)
      end
    end
  end
end

--- Handler of the server request `workspace/textDocumentContent/refresh` ({ uri }).
function M.on_refresh(_, params, _)
  local uri = type(params) == 'table' and params.uri or nil
  vim.schedule(function()
    M.refresh(uri)
  end)
  return vim.NIL
end

--- Opens a forge:// URI in the current window.
function M.open(uri, cmd)
  vim.cmd((cmd or 'edit') .. ' ' .. vim.fn.fnameescape(uri))
end

local group

function M.setup()
  group = vim.api.nvim_create_augroup('forge.documents', { clear = true })
  vim.api.nvim_create_autocmd('BufReadCmd', {
    group = group,
    pattern = 'forge://*',
    callback = function(ev)
      M.read(ev.buf, ev.match)
    end,
  })
  vim.api.nvim_create_autocmd({ 'BufWriteCmd', 'FileWriteCmd' }, {
    group = group,
    pattern = 'forge://*',
    callback = function(ev)
      M.write(ev.buf, ev.match)
    end,
  })
end

return M
