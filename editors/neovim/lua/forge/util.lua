-- Small helpers shared by the forge modules: version compatibility (Neovim 0.10 has
-- `client.request(...)`, 0.11 `client:request(...)`), notifications and errors.
local M = {}

M.has_011 = vim.fn.has('nvim-0.11') == 1

--- vim.notify with the plugin's prefix.
---@param msg string
---@param level? integer vim.log.levels.*
--- Scheduled: from an autocommand an error would otherwise be shown under an
--- "Error detected while processing ..." header, and fast contexts cannot notify.
function M.notify(msg, level)
  vim.schedule(function()
    vim.notify('forge: ' .. msg, level or vim.log.levels.INFO, { title = 'forge' })
  end)
end

function M.error(msg)
  M.notify(msg, vim.log.levels.ERROR)
end

function M.warn(msg)
  M.notify(msg, vim.log.levels.WARN)
end

local notified_once = {}

--- Notifies a message once per key for the whole Neovim session.
function M.notify_once(key, msg, level)
  if notified_once[key] then
    return
  end
  notified_once[key] = true
  M.notify(msg, level)
end

--- Forgets a key of notify_once (the condition was fixed; say it again next time).
function M.forget_once(key)
  notified_once[key] = nil
end

--- The text of an LSP error (a ResponseError table, a string or anything else).
function M.error_text(err)
  if type(err) == 'table' then
    return err.message or vim.inspect(err)
  end
  return tostring(err)
end

--- Asynchronous request, on either API.
---@return boolean ok, integer? request_id
function M.request(client, method, params, handler, bufnr)
  if M.has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

--- Synchronous request with a timeout. Returns result, err (err is a ResponseError table
--- or a string such as "timeout").
function M.request_sync(client, method, params, timeout_ms, bufnr)
  local resp, msg
  if M.has_011 then
    resp, msg = client:request_sync(method, params, timeout_ms, bufnr)
  else
    resp, msg = client.request_sync(method, params, timeout_ms, bufnr)
  end
  if not resp then
    return nil, msg or 'no response'
  end
  if resp.err then
    return nil, resp.err
  end
  return resp.result, nil
end

function M.is_stopped(client)
  if M.has_011 then
    return client:is_stopped()
  end
  return client.is_stopped()
end

function M.stop(client, force)
  if M.has_011 then
    return client:stop(force)
  end
  return client.stop(force)
end

--- The `arguments` list of workspace/executeCommand: one object. An empty Lua table would
--- encode as `[]`, so empty input is sent as an explicit empty dict.
function M.command_arguments(input)
  if input == nil or (type(input) == 'table' and next(input) == nil) then
    return { vim.empty_dict() }
  end
  return { input }
end

--- `forge://...` (or any other scheme) buffer names are URIs, not files.
function M.is_uri(name)
  return name:match('^%a[%w+.-]*://') ~= nil
end

function M.is_forge_uri(name)
  return name:match('^forge://') ~= nil
end

--- Splits a document text into buffer lines and says whether its lines end in CRLF: when
--- every line break is `\r\n`, the `\r`s are dropped (the buffer's 'fileformat' is then
--- dos, which puts them back when the text is sent or saved); a text with mixed line ends
--- keeps them as they are.
function M.split_text(text)
  text = text or ''
  local crlf = text:find('\r\n', 1, true) ~= nil and not (text:gsub('\r\n', '')):find('\n', 1, true)
  if crlf then
    text = (text:gsub('\r\n', '\n'))
  end
  return M.split_lines(text), crlf
end

--- Splits a document text into buffer lines (no phantom last line for a final newline).
function M.split_lines(text)
  local lines = vim.split(text or '', '\n', { plain = true })
  if #lines > 1 and lines[#lines] == '' then
    table.remove(lines)
  end
  return lines
end

--- Wall-clock time in epoch milliseconds (loop times are epoch milliseconds).
function M.epoch_ms()
  local s, us = vim.uv.gettimeofday()
  return s * 1000 + math.floor(us / 1000)
end

return M
