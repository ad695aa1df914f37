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

--- Sets a document buffer's lines; with `crlf` (a text whose lines end in CRLF,
--- `util.split_text`) its 'fileformat' is dos, so that what Neovim sends the server and
--- what :w stores end their lines as the stored text does (before, every line showed ^M).
local function set_lines(bufnr, lines, crlf)
  local modifiable, readonly = vim.bo[bufnr].modifiable, vim.bo[bufnr].readonly
  vim.bo[bufnr].modifiable = true
  vim.bo[bufnr].readonly = false
  -- First: the change below is sent to the server (whole text) at once, with the line
  -- ends of the 'fileformat' it finds (a review found the old ones sent).
  vim.bo[bufnr].fileformat = crlf and 'dos' or 'unix'
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

-- Lens requests in flight (Neovim 0.10 and 0.11), by "<bufnr>:<client id>":
-- { at = <start, ms>, again = true once another refresh came meanwhile }.
local lens_requests = {}

local function lenses_wanted(client)
  return options.get().codelens and vim.tbl_get(client.server_capabilities or {}, 'codeLensProvider') ~= nil
end

--- Asks for the buffer's code lenses again (when enabled and the server has them).
---
--- Neovim 0.10 and 0.11 ask only when told to: they do not declare
--- `workspace/codeLens/refresh`, so a loop plan's section statuses would stay as they were
--- when the buffer was opened. `vim.lsp.codelens.refresh` drops a refresh while one is in
--- flight, so the last change of a loop could be shown with the lenses of the one before:
--- here a refresh that comes meanwhile asks once more when the answer is in (a request
--- with no answer for `timeout_ms`, or whose client went away, no longer holds others
--- back).
---
--- Neovim 0.12 keeps a buffer's lenses itself once enabled for it, and re-asks in its
--- handler of `workspace/codeLens/refresh`, which is called here too (its
--- `on_codelens` no longer draws anything). Not run by this plugin's tests, whose Neovim
--- (the registry's) is 0.11.4.
local function refresh_lenses(client, bufnr, first)
  if not lenses_wanted(client) then
    return
  end
  local function attached()
    return vim.api.nvim_buf_is_valid(bufnr) and client.attached_buffers[bufnr]
  end
  local codelens = vim.lsp.codelens
  if codelens.enable then
    vim.schedule(function()
      if not attached() then
        return
      end
      local on_refresh = vim.lsp.handlers['workspace/codeLens/refresh']
      if first then
        pcall(codelens.enable, true, { bufnr = bufnr })
      elseif on_refresh then
        pcall(on_refresh, nil, nil, { client_id = client.id, method = 'workspace/codeLens/refresh' })
      end
    end)
    return
  end
  local key = bufnr .. ':' .. client.id
  local pending = lens_requests[key]
  if pending and vim.uv.now() - pending.at < options.get().timeout_ms then
    pending.again = true
    return
  end
  -- This request's own entry: an answer that comes after a newer request was sent (this
  -- one outlived `timeout_ms`, or the buffer was detached and attached again) neither
  -- draws over the newer lenses nor ends the newer request's entry.
  local req = { at = vim.uv.now(), again = false }
  lens_requests[key] = req
  local function current()
    return lens_requests[key] == req
  end
  vim.schedule(function()
    if not current() then
      return
    end
    if not attached() or util.is_stopped(client) then
      lens_requests[key] = nil
      return
    end
    local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) } }
    local ok, sent = pcall(util.request, client, 'textDocument/codeLens', params, function(err, result, ctx)
      if not current() then
        return
      end
      lens_requests[key] = nil
      if attached() then
        local drawn, e = pcall(codelens.on_codelens, err, result, ctx)
        if not drawn then
          pcall(require('vim.lsp.log').warn, 'forge: code lenses of buffer ' .. bufnr .. ' not drawn: ' .. tostring(e))
        end
      end
      if req.again then
        refresh_lenses(client, bufnr)
      end
    end, bufnr)
    if not (ok and sent) and current() then
      lens_requests[key] = nil
    end
  end)
end

--- Draws the buffer's lenses again (after a lens command ran: Neovim clears the lens's
--- line before running it, and only its own command handler redraws).
function M.redraw_lenses(client, bufnr)
  if bufnr and vim.api.nvim_buf_is_valid(bufnr) then
    refresh_lenses(client, bufnr)
  end
end

--- Forgets the lens requests of a buffer and client (LspDetach).
function M.detached(bufnr, client_id)
  lens_requests[bufnr .. ':' .. client_id] = nil
end

local function attach(client, bufnr)
  vim.b[bufnr].forge_client = client.id
  if not client.attached_buffers[bufnr] then
    vim.lsp.buf_attach_client(bufnr, client.id)
  end
  refresh_lenses(client, bufnr, true)
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
    if editable and type(err) == 'table' and err.code == 1002 and M.session_plan_id(uri) == clients.session_id(client) then
      -- No plan yet for this connection's own session: an empty plan the user writes and
      -- saves with :w. Another session's missing plan is an error (a mistyped id would
      -- otherwise become a new plan on :w).
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
    vim.b[bufnr].forge_base = text
    vim.b[bufnr].forge_base_unknown = nil
    local lines, crlf = util.split_text(text)
    set_lines(bufnr, lines, crlf)
    setup_buffer(bufnr, uri, editable)
  end
  vim.b[bufnr].forge_root = clients.root(client)
  attach(client, bufnr)
end

--- The stored text of a session plan now (`false`: none stored), or nil and the error.
local function stored_text(client, uri)
  local result, err = util.request_sync(client, 'workspace/textDocumentContent', { uri = uri }, options.get().timeout_ms)
  if err then
    if type(err) == 'table' and err.code == 1002 then
      return false
    end
    return nil, err
  end
  return (result and result.text) or ''
end

--- BufWriteCmd forge://*: saves a session plan with forge.plan-write.
function M.write(bufnr, uri, force, partial)
  if partial then
    -- `:1,5w forge://...`: a plan is stored whole (the range was ignored before).
    util.error('a plan is saved whole: write the whole buffer (without a line range).')
    return false
  end
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
  local eol = vim.bo[bufnr].fileformat == 'dos' and '\r\n' or '\n'
  local text = table.concat(lines, eol)
  if vim.b[bufnr].forge_eol ~= false and text ~= '' then
    text = text .. eol
  end
  -- The plan as it was when this buffer last read or saved it: if the stored one is no
  -- longer that (written meanwhile from a shell, an agent or another editor, while this
  -- buffer was not told: its server was down or restarted), saving would undo that write
  -- without a word. `:w!` saves over it.
  local base = vim.b[bufnr].forge_base
  -- The buffer's own document is the one its text was read from (`b:forge_uri`), not its
  -- name: `:saveas` renames the buffer before writing (a review found such writes compared
  -- with the old plan). Its save is compared with what it read, unless the last save could
  -- not read back what it stored (`forge_base_unknown`). A write to another plan's name
  -- must not replace a plan stored there, as `:w` refuses an existing file (E13): `!`.
  local own = vim.b[bufnr].forge_uri == uri
  if not force and not own then
    local there, err = stored_text(client, uri)
    if there == nil then
      util.error('saving the plan failed: cannot read the stored plan to compare: ' .. util.error_text(err))
      return false
    end
    if there ~= false and there ~= text then
      util.error(uri .. ' holds another plan; not written. Add ! to write over it.')
      return false
    end
  end
  if not force and own and not vim.b[bufnr].forge_base_unknown then
    local now, err = stored_text(client, uri)
    if now == nil then
      util.error('saving the plan failed: cannot read the stored plan to compare: ' .. util.error_text(err))
      return false
    end
    local expected = base
    if expected == nil then
      expected = false
    end
    if now ~= expected and now ~= text then
      util.error(
        uri
          .. ' was changed since this buffer read it (from a shell, an agent or another editor); not saved. :e! loads the stored plan (your edits are lost), :w! saves yours over it.'
      )
      return false
    end
  end
  local result, err = clients.exec_sync(client, 'forge.plan-write', { content = text, session_id = sid })
  if err then
    util.error('saving the plan failed: ' .. util.error_text(err))
    return false
  end
  if vim.api.nvim_buf_get_name(bufnr) == uri then
    vim.bo[bufnr].modified = false
  end
  -- What the server stored (it may normalize what it is given) is the next save's base;
  -- when it cannot be read back, the next save is not checked (rather than refused). A
  -- buffer renamed to the target (`:saveas`) is that plan's from now on.
  if vim.api.nvim_buf_get_name(bufnr) == uri then
    vim.b[bufnr].forge_uri = uri
    own = true
  end
  if own then
    local stored = stored_text(client, uri)
    vim.b[bufnr].forge_base = stored or nil
    vim.b[bufnr].forge_base_unknown = stored == nil or nil
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
      -- Said only when the stored text is not what the buffer read (a restart re-reads
      -- every plan buffer); the buffer is this client's either way.
      if result.text ~= vim.b[bufnr].forge_base then
        util.warn(uri .. ' changed on the server; your buffer has unsaved edits (:e! loads the new text).')
      end
      if not client.attached_buffers[bufnr] then
        attach(client, bufnr)
      end
      return
    end
    vim.b[bufnr].forge_base = result.text or ''
    vim.b[bufnr].forge_base_unknown = nil
    local lines, crlf = util.split_text(result.text or '')
    local old = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
    if not vim.deep_equal(lines, old) or (vim.bo[bufnr].fileformat == 'dos') ~= crlf then
      local cursors = {}
      for _, win in ipairs(vim.fn.win_findbuf(bufnr)) do
        cursors[win] = vim.api.nvim_win_get_cursor(win)
      end
      set_lines(bufnr, lines, crlf)
      for win, pos in pairs(cursors) do
        local row = math.min(pos[1], vim.api.nvim_buf_line_count(bufnr))
        pcall(vim.api.nvim_win_set_cursor, win, { row, pos[2] })
      end
    end
    -- The server's refresh of a document is also its word that what the document's lenses
    -- show changed (a loop plan's text never does; its section statuses do). A buffer
    -- read through a client that has since been restarted is attached to the new one.
    if client.attached_buffers[bufnr] then
      refresh_lenses(client, bufnr)
    else
      attach(client, bufnr)
    end
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

--- A client of `root` started (a restart after the server stopped): the forge:// buffers
--- read from that project's earlier server, now gone, are read again from this one (they
--- were never told what changed while it was down).
function M.reattach(client, root)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(b) and util.is_forge_uri(vim.api.nvim_buf_get_name(b)) and vim.b[b].forge_root == root then
      local old = vim.b[b].forge_client and vim.lsp.get_client_by_id(vim.b[b].forge_client)
      if not old or old.id ~= client.id and util.is_stopped(old) then
        vim.b[b].forge_client = client.id
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

--- The buffer of a forge:// URI, bound to `client` when it is not loaded yet: its read
--- then asks that client's server (the project the command was run in), not the working
--- directory's. One URI is one buffer, whichever project it came from.
function M.bind(uri, client)
  local b = vim.fn.bufadd(uri)
  if client and not vim.api.nvim_buf_is_loaded(b) then
    vim.b[b].forge_client = client.id
  end
  return b
end

--- Opens a forge:// URI in the current window (from `client`'s server when given).
function M.open(uri, cmd, client)
  M.bind(uri, client)
  vim.cmd((cmd or 'edit') .. ' ' .. vim.fn.fnameescape(uri))
end

local group

function M.setup()
  group = vim.api.nvim_create_augroup('forge.documents', { clear = true })
  vim.api.nvim_create_autocmd('LspDetach', {
    group = group,
    callback = function(ev)
      if ev.data and ev.data.client_id then
        M.detached(ev.buf, ev.data.client_id)
      end
    end,
  })
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
      -- FileWriteCmd: a part of the buffer (a line range).
      M.write(ev.buf, ev.match, vim.v.cmdbang == 1, ev.event == 'FileWriteCmd')
    end,
  })
end

return M
