-- Starting forge-lsp for a project (the git root of a file) and finding the client that
-- serves a buffer. Neovim 0.11+: vim.lsp.config + vim.lsp.enable; Neovim 0.10:
-- vim.lsp.start from autocommands. Never starts a server for `forge://` buffers: those
-- are attached to the client that served them (see forge.documents).
local util = require('forge.util')
local options = require('forge.config')

local M = {}

--- client id -> { root, session, initialized }
M.info = {}
--- roots whose start with a stored session id has not finished initializing
M.trying = {}

local ERROR, WARN = vim.log.levels.ERROR, vim.log.levels.WARN

-- Session persistence: one Forge session id per project root, so the session plan
-- survives a restart of Neovim.

local function sessions_file()
  return vim.fs.joinpath(vim.fn.stdpath('data'), 'forge', 'sessions.json')
end

local function load_sessions()
  local f = io.open(sessions_file(), 'r')
  if not f then
    return {}
  end
  local text = f:read('*a')
  f:close()
  local ok, data = pcall(vim.json.decode, text)
  if ok and type(data) == 'table' then
    return data
  end
  return {}
end

local function save_sessions(data)
  local path = sessions_file()
  vim.fn.mkdir(vim.fs.dirname(path), 'p')
  local f = io.open(path, 'w')
  if not f then
    return
  end
  f:write(vim.json.encode(next(data) and data or vim.empty_dict()))
  f:close()
end

local function remember_session(root, sid)
  local data = load_sessions()
  if data[root] ~= sid then
    data[root] = sid
    save_sessions(data)
  end
end

local function forget_session(root)
  local data = load_sessions()
  if data[root] ~= nil then
    data[root] = nil
    save_sessions(data)
  end
end

-- Project detection and the checks that turn bad input into a clear message.

local main_roots = {}

--- A linked worktree (`.git` is a file: a loop's worktree, `git worktree add`) belongs to
--- the repository's main worktree: one server serves both (same Forge project).
local function main_root(root)
  if main_roots[root] then
    return main_roots[root]
  end
  local result = root
  local st = vim.uv.fs_stat(vim.fs.joinpath(root, '.git'))
  if st and st.type == 'file' then
    local ok, res = pcall(function()
      return vim.system({ 'git', '-C', root, 'rev-parse', '--path-format=absolute', '--git-common-dir' }, { text = true })
        :wait(5000)
    end)
    local common = ok and res.code == 0 and vim.trim(res.stdout or '') or ''
    if common:match('/%.git$') and vim.fn.isdirectory(common) == 1 then
      result = vim.fs.dirname(common)
    end
  end
  main_roots[root] = result
  return result
end

--- The project root (git root) of a file buffer; nil for URIs, special buffers and files
--- outside a git repository.
function M.buf_root(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].buftype ~= '' then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' or util.is_uri(name) then
    return nil
  end
  local root = vim.fs.root(name, '.git')
  return root and main_root(root) or nil
end

--- The git root of the working directory.
function M.cwd_root()
  local root = vim.fs.root(vim.fn.getcwd(), '.git')
  return root and main_root(root) or nil
end

--- Whether the server command can be run; says why not, once.
--- Whether the configured command can be run; says why not, once (`always`: every time,
--- for a command that then does nothing).
function M.executable(always)
  local cmd = options.cmd()
  if vim.fn.executable(cmd[1]) == 1 then
    return true
  end
  -- A name is looked up on PATH; a path is not (a review found "not found on PATH" said
  -- of an absolute path).
  local why
  if not cmd[1]:find('/', 1, true) then
    why = 'not found on PATH'
  elseif vim.uv.fs_stat(cmd[1]) then
    why = 'it exists but cannot be run: check its permissions'
  else
    why = 'no such file'
  end
  local msg = ("cannot start the server: '%s' is not an executable file (%s). "
    .. "Install forge-lsp or set its path: require('forge').setup({ cmd = { '/path/to/forge-lsp' } })"):format(cmd[1], why)
  if always then
    util.error(msg)
  else
    util.notify_once('exe:' .. cmd[1], msg, ERROR)
  end
  return false
end

local committed = {}

--- Whether the repository at root has a commit (forge-lsp identifies a project by its
--- first commit); says why not, once per root (unless `quiet`).
function M.has_commit(root, quiet)
  if committed[root] then
    return true
  end
  local ok, res = pcall(function()
    return vim.system({ 'git', '-C', root, 'rev-parse', '--verify', '-q', 'HEAD^{commit}' }, { text = true }):wait(5000)
  end)
  if not ok then
    util.notify_once('git', 'cannot run git (' .. util.error_text(res) .. '); forge-lsp needs git.', ERROR)
    return false
  end
  if res.code == 0 then
    committed[root] = true
    return true
  end
  if quiet then
    return false
  end
  util.notify_once(
    'nocommit:' .. root,
    ('%s has no commits yet: forge-lsp identifies a project by its first commit. '
      .. 'Commit something (git commit), then reopen the file (:edit).'):format(root),
    WARN
  )
  return false
end

function M.can_start(root)
  return M.executable() and M.has_commit(root)
end

-- The client configuration.

local function capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.workspace = caps.workspace or {}
  -- LSP 3.18: we open forge:// documents ourselves (forge.documents), so the server serves
  -- them instead of materializing copies under .forge/view/.
  caps.workspace.textDocumentContent = { dynamicRegistration = false }
  caps.window = caps.window or {}
  caps.window.workDoneProgress = true
  return caps
end

local function spawn(dispatchers, cfg)
  local cmd = options.cmd()
  local extra = { cwd = cfg and cfg.root_dir or nil, env = options.get().cmd_env }
  local ok, rpc = pcall(vim.lsp.rpc.start, cmd, dispatchers, extra)
  if not ok then
    vim.schedule(function()
      util.error(('cannot start %s: %s'):format(table.concat(cmd, ' '), util.error_text(rpc)))
    end)
    error(rpc, 0)
  end
  -- Neovim asserts on an `initialize` error (a stack trace, and a client that never
  -- starts): say what the server said instead and stop it.
  local request, is_closing = rpc.request, rpc.is_closing
  local refused = false
  -- A refused client counts as stopped at once, so the next start does not reuse it.
  rpc.is_closing = function(...)
    return refused or is_closing(...)
  end
  rpc.request = function(method, params, callback, ...)
    if method == 'initialize' and type(callback) == 'function' then
      local inner = callback
      callback = function(err, result)
        if err then
          local text = util.error_text(err)
          vim.schedule(function()
            -- (Neovim 0.10 does not pass the config to cmd: the root being tried.)
            local root = (cfg and cfg.root_dir) or next(M.trying)
            if type(err) == 'table' and err.code == 1001 and root and M.trying[root] then
              -- The session stored for this project is refused: start fresh next time.
              M.trying[root] = nil
              forget_session(root)
              text = text .. ' (the stored session is forgotten: reopen the file to start with a new one)'
            end
            util.notify_once('init:' .. text, 'forge-lsp refused to start: ' .. text, vim.log.levels.ERROR)
          end)
          refused = true
          rpc.terminate()
          return
        end
        return inner(err, result)
      end
    end
    return request(method, params, callback, ...)
  end
  return rpc
end

local function before_init(params, cfg)
  local opts = options.get()
  local forge = {}
  if opts.data_dir then
    forge.dataDir = vim.fn.expand(opts.data_dir)
  end
  if type(opts.config) == 'table' and next(opts.config) then
    forge.config = opts.config
  end
  if opts.persist_session and cfg.root_dir then
    local sid = load_sessions()[cfg.root_dir]
    if type(sid) == 'string' and sid ~= '' then
      forge.session = sid
      M.trying[cfg.root_dir] = sid
    end
  end
  params.initializationOptions = { forge = next(forge) and forge or vim.empty_dict() }
end

local function on_init(client, result)
  local root = client.root_dir or (client.config and client.config.root_dir)
  local sid = vim.tbl_get(result or {}, 'capabilities', 'experimental', 'forge', 'sessionId')
  M.info[client.id] = { root = root, session = sid, initialized = true }
  if root then
    M.trying[root] = nil
  end
  if sid and root and options.get().persist_session then
    remember_session(root, sid)
  end
  if not root then
    return
  end
  -- After a restart (the server stopped, then :Forge start or a reopened file started this
  -- one), the file buffers the project's earlier client had are this one's again, not only
  -- the one that started it, and forge:// buffers of the project are read again (found by
  -- a review). Only those: a first start attaches as configured (`filetypes`).
  local orphans = M.orphans[root]
  M.orphans[root] = nil
  vim.schedule(function()
    local c = vim.lsp.get_client_by_id(client.id)
    if not c or util.is_stopped(c) then
      return
    end
    for _, b in ipairs(orphans or {}) do
      if vim.api.nvim_buf_is_loaded(b) and not c.attached_buffers[b] and M.buf_root(b) == root then
        pcall(vim.lsp.buf_attach_client, b, c.id)
      end
    end
    require('forge.documents').reattach(c, root)
  end)
end

--- The file buffers of each project's client that stopped, by root: the next client of
--- the project attaches them ([`on_init`]).
M.orphans = {}

--- Whether an exit is a stop asked for (:Forge stop, quitting Neovim) or a clean exit.
local function intended(code, signal)
  return (code == 0 and (signal == 0 or signal == 15)) or signal == 15
end

--- Neovim warns "Client <name> quit with exit code …" itself for every exit that was not
--- intended, from a callback it schedules after ours run; our error says the same and how
--- to restart, so Neovim's is left out: one message per crash (a review counted two).
--- Only that one message of that client is dropped: after it, or after a second, the
--- filter passes everything on, and it is taken out of `vim.notify` when it is still there
--- (a plugin that wrapped `vim.notify` meanwhile keeps its wrapper, which then calls a
--- filter that does nothing).
local function drop_neovims_exit_warning(name)
  local notify = vim.notify
  local prefix = ('Client %s quit with exit code '):format(name)
  local done = false
  local filter
  local function restore()
    done = true
    if vim.notify == filter then
      vim.notify = notify
    end
  end
  filter = function(msg, ...)
    if not done and type(msg) == 'string' and msg:sub(1, #prefix) == prefix then
      restore()
      return
    end
    return notify(msg, ...)
  end
  vim.notify = filter
  vim.defer_fn(restore, 1000)
end

local function on_exit(code, signal, client_id)
  local info = M.info[client_id]
  M.info[client_id] = nil
  -- Still registered here (Neovim forgets the client after the exit callbacks): its file
  -- buffers, for the project's next client. A plain table read, allowed in a fast event.
  local gone = vim.lsp.get_client_by_id(client_id)
  if gone and gone.name and not intended(code, signal) then
    drop_neovims_exit_warning(gone.name)
  end
  local root = (info and info.root) or (gone and gone.root_dir)
  if gone and root then
    local bufs = {}
    for b in pairs(gone.attached_buffers or {}) do
      bufs[#bufs + 1] = b
    end
    M.orphans[root] = bufs
  end
  -- on_exit runs in a fast event context: no Vimscript functions here.
  vim.schedule(function()
    require('forge.loops').forget_client(client_id)
    if intended(code, signal) then
      return
    end
    local how = ('exit code %s%s'):format(code, (signal ~= 0) and (', signal ' .. signal) or '')
    if not info then
      util.error(
        ('forge-lsp failed to start (%s): no findings or loop status. Check the server with `%s --version`; log: %s'):format(
          how,
          options.cmd()[1],
          vim.lsp.get_log_path()
        )
      )
    else
      util.error(
        ('forge-lsp for %s stopped unexpectedly (%s): findings and loop status are no longer updated. '
          .. 'Reopen a file (:edit) or run :Forge start to restart it. Log: %s'):format(info.root or '?', how, vim.lsp.get_log_path())
      )
    end
  end)
end

local function handlers()
  return {
    ['forge/loopStatus'] = function(...)
      return require('forge.loops').on_status(...)
    end,
    ['window/showMessage'] = function(...)
      return require('forge.loops').on_show_message(...)
    end,
    ['workspace/textDocumentContent/refresh'] = function(...)
      return require('forge.documents').on_refresh(...)
    end,
  }
end

--- A fresh client configuration (without root_dir).
function M.make_config()
  return {
    name = options.get().name,
    cmd = spawn,
    capabilities = capabilities(),
    before_init = before_init,
    on_init = on_init,
    on_exit = on_exit,
    handlers = handlers(),
  }
end

local function use_enable()
  return util.has_011 and vim.lsp.config ~= nil and vim.lsp.enable ~= nil
end

--- The configuration to start with, including what the user set with vim.lsp.config.
local function resolved_config(root)
  local cfg
  if use_enable() then
    cfg = vim.deepcopy(vim.lsp.config[options.get().name] or M.make_config())
  else
    cfg = M.make_config()
  end
  cfg.root_dir = root
  cfg.root_markers = nil
  return cfg
end

function M.clients()
  local name = options.get().name
  local get = vim.lsp.get_clients or vim.lsp.get_active_clients
  return get({ name = name })
end

--- Starts (or reuses) the project's client and attaches it to a file buffer.
function M.attach(bufnr)
  local root = M.buf_root(bufnr)
  if not root then
    return nil
  end
  for _, c in ipairs(M.clients()) do
    -- A client still stopping (`:Forge stop | Forge start`) is not reused (a review).
    if c.attached_buffers[bufnr] and not util.is_stopped(c) then
      return c.id
    end
  end
  if not M.can_start(root) then
    return nil
  end
  return vim.lsp.start(resolved_config(root), { bufnr = bufnr })
end

--- Starts the client of a root without attaching a buffer; returns the client.
function M.start_detached(root)
  for _, c in ipairs(M.clients()) do
    if c.root_dir == root and not util.is_stopped(c) then
      return c
    end
  end
  if not M.can_start(root) then
    return nil
  end
  local cfg = resolved_config(root)
  local id
  if util.has_011 then
    id = vim.lsp.start(cfg, { attach = false })
  else
    id = vim.lsp.start_client(cfg)
  end
  return id and vim.lsp.get_client_by_id(id) or nil
end

--- Waits (bounded) until a client is initialized; false when it stopped or timed out.
function M.wait_initialized(client, timeout_ms)
  if client.initialized then
    return true
  end
  vim.wait(timeout_ms or options.get().timeout_ms, function()
    return client.initialized or util.is_stopped(client)
  end, 10)
  return client.initialized and not util.is_stopped(client)
end

--- The project root of a buffer: its file's; a forge:// document's, the project whose
--- server filled it (`b:forge_root`: a review found a document whose server had died
--- taken for the working directory's project, and its plan saved there); else the working
--- directory's.
function M.root_of(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local forge_root = vim.api.nvim_buf_is_valid(bufnr) and vim.b[bufnr].forge_root or nil
  return M.buf_root(bufnr) or (type(forge_root) == 'string' and forge_root ~= '' and forge_root or nil) or M.cwd_root()
end

--- The client serving a buffer: attached to it, the one that served a forge:// buffer,
--- the one of the buffer's (or the working directory's) root; when neither has a root,
--- the only one. Never another project's: a buffer of a project whose server has not
--- started yet (or cannot start: no commit) has none, and `ensure` starts or refuses it
--- (before, commands ran against the first project's server; a review).
function M.for_buf(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local name = options.get().name
  local get = vim.lsp.get_clients or vim.lsp.get_active_clients
  local attached = get({ bufnr = bufnr, name = name })
  if attached[1] then
    return attached[1]
  end
  local served = vim.b[bufnr] and vim.b[bufnr].forge_client
  if served then
    local c = vim.lsp.get_client_by_id(served)
    if c and not util.is_stopped(c) then
      return c
    end
  end
  local all = M.clients()
  local root = M.root_of(bufnr)
  if root then
    for _, c in ipairs(all) do
      if c.root_dir == root and not util.is_stopped(c) then
        return c
      end
    end
    return nil
  end
  return #all == 1 and all[1] or nil
end

--- A running, initialized client for commands, starting one for the working directory's
--- project when none runs. Says why not and returns nil on failure.
function M.ensure(bufnr)
  local client = M.for_buf(bufnr)
  if not client then
    local root = M.root_of(bufnr)
    if not root then
      util.error('no forge-lsp server: open a file inside a git repository (or :cd into one) first.')
      return nil
    end
    -- Said for every command, not once: the command did nothing (review YQ: a missing
    -- binary was said once, and every later command was silent).
    if not M.executable(true) then
      return nil
    end
    if not M.has_commit(root, true) then
      util.error(('no forge-lsp server for %s: it has no commits yet (forge-lsp identifies a project by its '
        .. 'first commit). Commit something (git commit) first.'):format(root))
      return nil
    end
    client = M.start_detached(root)
    if not client then
      return nil
    end
  end
  if not M.wait_initialized(client) then
    util.error('forge-lsp did not finish starting (see :Forge info and ' .. vim.lsp.get_log_path() .. ').')
    return nil
  end
  return client
end

--- The Forge session id of a client (initialize result capabilities.experimental.forge).
function M.session_id(client)
  local info = M.info[client.id]
  if info and info.session then
    return info.session
  end
  return vim.tbl_get(client.server_capabilities or {}, 'experimental', 'forge', 'sessionId')
end

function M.root(client)
  local info = M.info[client.id]
  return (info and info.root) or client.root_dir
end

--- Runs `forge.<tool>` (workspace/executeCommand) asynchronously; cb(err, result).
function M.exec(client, command, input, cb)
  local params = { command = command, arguments = util.command_arguments(input) }
  local ok = util.request(client, 'workspace/executeCommand', params, function(err, result)
    cb(err, result)
  end)
  if not ok then
    cb({ message = 'forge-lsp is not running' }, nil)
  end
end

--- Runs `forge.<tool>` synchronously (bounded); returns result, err.
function M.exec_sync(client, command, input, timeout_ms)
  local params = { command = command, arguments = util.command_arguments(input) }
  return util.request_sync(client, 'workspace/executeCommand', params, timeout_ms or options.get().timeout_ms)
end

local group

--- The commands of the server's lenses and code actions, run here instead of by Neovim's
--- own handler, which drops their reply on success and shows a bare error: the reply is
--- shown (its first line; a loop's whole status), and an error names the tool.
local function register_commands()
  local shown = {
    ['forge.execute-plan'] = 'line',
    ['forge.review-delete'] = 'line',
    ['forge.loop-status'] = 'all',
  }
  for name, how in pairs(shown) do
    vim.lsp.commands[name] = function(command, ctx)
      local client = vim.lsp.get_client_by_id(ctx.client_id)
      if not client then
        return
      end
      local input = type(command.arguments) == 'table' and command.arguments[1] or nil
      M.exec(client, name, input, function(err, res)
        -- A lens's line was cleared before it ran (Neovim's lens runner): drawn again.
        require('forge.documents').redraw_lenses(client, ctx.bufnr)
        if err then
          util.error(name:gsub('^forge%.', '') .. ': ' .. util.error_text(err))
          return
        end
        local text = (res and res.text) or ''
        util.notify(how == 'line' and text:match('^[^\n]*') or text)
      end)
    end
  end
end

--- The client name the last setup() configured, to take back when setup() names another.
local configured_name

--- (Re)configures automatic start. Idempotent; called by plugin/forge.lua and setup().
function M.setup()
  register_commands()
  local opts = options.get()
  group = vim.api.nvim_create_augroup('forge.start', { clear = true })
  if configured_name and configured_name ~= opts.name then
    -- setup({ name = ... }) after plugin/forge.lua configured the default (lazy.nvim's
    -- order): the old name is disabled and its clients stopped, or every buffer had two
    -- servers and every finding showed twice (a review; on Neovim 0.10's path too). The
    -- new name's clients start below for the buffers already open.
    if use_enable() then
      vim.lsp.enable(configured_name, false)
    end
    local get = vim.lsp.get_clients or vim.lsp.get_active_clients
    for _, c in ipairs(get({ name = configured_name })) do
      util.stop(c, true)
    end
  end
  configured_name = opts.name
  if use_enable() then
    local cfg = M.make_config()
    cfg.root_dir = function(bufnr, on_dir)
      local root = M.buf_root(bufnr)
      if root and M.can_start(root) then
        on_dir(root)
      end
    end
    vim.lsp.config(opts.name, cfg)
    vim.lsp.enable(opts.name, opts.autostart ~= false)
  end
  if opts.autostart == false then
    return
  end
  -- vim.lsp.enable starts clients on FileType; files without a filetype (and every file
  -- on Neovim 0.10) are started here.
  local function maybe_attach(bufnr)
    if use_enable() and vim.bo[bufnr].filetype ~= '' then
      return
    end
    M.attach(bufnr)
  end
  vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile' }, {
    group = group,
    callback = function(ev)
      maybe_attach(ev.buf)
    end,
  })
  if vim.v.vim_did_enter == 1 then
    for _, b in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(b) then
        maybe_attach(b)
      end
    end
  end
end

return M
