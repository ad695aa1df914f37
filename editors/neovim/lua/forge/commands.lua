-- The :Forge command.
local util = require('forge.util')
local clients = require('forge.client')
local options = require('forge.config')
local documents = require('forge.documents')
local loops = require('forge.loops')

local M = {}

-- Loop names seen in :Forge loops answers (completion also offers the notified ones).
local listed_loops = {}

local function fail(what, err)
  util.error(what .. ': ' .. util.error_text(err))
end

--- The first line of a reply text (the rest is in the documents and the quickfix lists).
local function first_line(text, default)
  local line = type(text) == 'string' and text:match('^[^\n]*') or ''
  return line ~= '' and line or default
end

local function oneline(s)
  return ((s or ''):gsub('%s*\n%s*', ' '))
end

local function set_qf(title, items)
  vim.fn.setqflist({}, ' ', { title = title, items = items })
  if options.get().open_quickfix and #items > 0 then
    vim.cmd('botright copen')
  end
end

local function is_abs(path)
  return path:sub(1, 1) == '/' or path:match('^%a:[/\\]') ~= nil
end

--- The file a finding names, as a path to open.
local function finding_path(root, f, worktree)
  local file = f.file or ''
  if is_abs(file) then
    return file
  end
  local in_root = root and vim.fs.joinpath(root, file) or file
  if worktree and vim.fn.filereadable(in_root) == 0 then
    local in_worktree = vim.fs.joinpath(worktree, file)
    if vim.fn.filereadable(in_worktree) == 1 then
      return in_worktree
    end
  end
  return in_root
end

local function finding_item(root, f, worktree)
  local text = oneline(f.description)
  if type(f.scenario) == 'string' and f.scenario ~= '' then
    text = text .. ' Scenario: ' .. oneline(f.scenario)
  end
  if type(f.loopName) == 'string' then
    local where = 'loop ' .. f.loopName
    if type(f.sectionIndex) == 'number' then
      where = where .. ', section ' .. (f.sectionIndex + 1)
    end
    text = text .. ' [' .. where .. ']'
  end
  return {
    filename = finding_path(root, f, worktree),
    lnum = tonumber(f.line) or 1,
    type = f.severity == 'bug' and 'E' or 'W',
    text = text,
    user_data = { findingId = f.id, loopName = f.loopName },
  }
end

local function findings_from_diagnostics()
  local diags = vim.tbl_filter(function(d)
    return d.source == 'forge'
  end, vim.diagnostic.get(nil))
  return vim.diagnostic.toqflist(diags)
end

--- :Forge findings — every open finding of the project (outside loops and in loops that
--- are not completed) in the quickfix list.
function M.findings(client)
  local root = clients.root(client)
  local items, seen = {}, {}
  local function add(list, worktree)
    for _, f in ipairs(list or {}) do
      local key = f.id or (tostring(f.file) .. ':' .. tostring(f.line) .. ':' .. tostring(f.loopName))
      if not seen[key] then
        seen[key] = true
        items[#items + 1] = finding_item(root, f, worktree)
      end
    end
  end
  local function finish()
    table.sort(items, function(a, b)
      if a.filename ~= b.filename then
        return a.filename < b.filename
      end
      return a.lnum < b.lnum
    end)
    set_qf('Forge findings', items)
    util.notify(#items == 0 and 'no findings.' or (#items == 1 and '1 finding.' or (#items .. ' findings.')))
  end
  clients.exec(client, 'forge.review-read', nil, function(err, res)
    if err then
      util.warn('review-read failed (' .. util.error_text(err) .. '); showing the findings diagnostics instead.')
      set_qf('Forge findings', findings_from_diagnostics())
      return
    end
    add(vim.tbl_get(res or {}, 'data', 'findings'))
    clients.exec(client, 'forge.loop-status', nil, function(err2, res2)
      local active = {}
      for _, l in ipairs((not err2 and vim.tbl_get(res2 or {}, 'data', 'loops')) or {}) do
        if l.status ~= 'completed' then
          active[#active + 1] = l.loopName
        end
      end
      local pending = #active
      if pending == 0 then
        return finish()
      end
      for _, name in ipairs(active) do
        clients.exec(client, 'forge.review-read', { loopName = name, allSections = true }, function(err3, res3)
          if not err3 then
            local known = loops.loops[name]
            add(vim.tbl_get(res3 or {}, 'data', 'findings'), known and known.worktreeDir or nil)
          end
          pending = pending - 1
          if pending == 0 then
            finish()
          end
        end)
      end
    end)
  end)
end

--- :Forge plans — the project's recent plans in the quickfix list (forge:// entries).
function M.plans(client)
  clients.exec(client, 'forge.plan-read', { recent = true, count = 50 }, function(err, res)
    if err then
      return fail('plan-read', err)
    end
    local items = {}
    for _, p in ipairs(vim.tbl_get(res or {}, 'data', 'plans') or {}) do
      if type(p.uri) == 'string' and p.uri ~= '' then
        local text = tostring(p.label or '')
        if type(p.firstLine) == 'string' and p.firstLine ~= '' then
          text = text .. ': ' .. p.firstLine
        end
        items[#items + 1] = { bufnr = documents.bind(p.uri, client), lnum = 1, text = text }
      end
    end
    set_qf('Forge plans', items)
    if #items == 0 then
      util.notify('no plans yet (:Forge plan opens yours).')
    end
  end)
end

--- :Forge loops — the project's loops in the quickfix list (status documents).
function M.list_loops(client)
  clients.exec(client, 'forge.loop-status', nil, function(err, res)
    if err then
      return fail('loop-status', err)
    end
    local items = {}
    listed_loops = {}
    loops.reconcile(client.id, vim.tbl_get(res or {}, 'data', 'loops'))
    for _, l in ipairs(vim.tbl_get(res or {}, 'data', 'loops') or {}) do
      listed_loops[#listed_loops + 1] = l.loopName
      local text = loops.format(l)
      if l.status ~= 'running' and type(l.terminationReason) == 'string' and l.terminationReason ~= l.status then
        text = text .. ' (' .. l.terminationReason .. ')'
      end
      local uri = ('forge://loop/%s/status.md'):format(l.loopName)
      items[#items + 1] = { bufnr = documents.bind(uri, client), lnum = 1, text = text }
    end
    set_qf('Forge loops', items)
    if #items == 0 then
      util.notify('no loops in this project (:Forge execute starts one from your plan).')
    end
  end)
end

--- :Forge plan [sessionId] — opens the session plan (this connection's by default).
function M.plan(client, sid)
  sid = sid or clients.session_id(client)
  if not sid then
    util.error('the server did not report its session id (initialize result capabilities.experimental.forge.sessionId).')
    return
  end
  documents.open(documents.session_plan_uri(sid), nil, client)
end

--- The plan's title (its first `# ` heading) and its `Loop Name:` (the first canonical
--- line outside code fences), as a launch from the editor names the loop.
local function plan_names(text)
  local title, loop_name
  local fence
  for line in vim.gsplit(text or '', '\n', { plain = true }) do
    local f = line:match('^%s*(```+)') or line:match('^%s*(~~~+)')
    if fence then
      if f and f:sub(1, 1) == fence:sub(1, 1) and #f >= #fence and line:match('^%s*[`~]+%s*$') then
        fence = nil
      end
    elseif f then
      fence = f
    else
      title = title or line:match('^#%s+(.-)%s*$')
      loop_name = loop_name or line:match('^Loop Name:%s*([a-z0-9]+[-a-z0-9]*)%s*$')
    end
  end
  if title == '' then
    title = nil
  end
  return title, loop_name
end

--- :Forge execute [title] — executes the session plan as a loop (forge.execute-plan).
function M.execute(client, title)
  local buf = vim.api.nvim_get_current_buf()
  local own = clients.session_id(client)
  local sid = documents.session_plan_id(vim.api.nvim_buf_get_name(buf))
  local input = {}
  local text
  if sid then
    if vim.bo[buf].modified then
      util.error('the plan has unsaved changes: save it first (:w).')
      return
    end
    text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    if sid ~= own then
      -- Another session's plan (opened from :Forge plans): send it inline.
      input.plan = text
    end
  elseif own then
    local res = util.request_sync(
      client,
      'workspace/textDocumentContent',
      { uri = documents.session_plan_uri(own) },
      options.get().timeout_ms
    )
    text = res and res.text or nil
  end
  local plan_title, loop_name = plan_names(text)
  input.title = title or plan_title or 'Plan'
  input.loopName = loop_name
  clients.exec(client, 'forge.execute-plan', input, function(err, res)
    if err then
      -- A failed start may still have announced the loop as running: ask the server.
      loops.sync(client)
      return fail('execute-plan', err)
    end
    local name = vim.tbl_get(res or {}, 'data', 'loopName')
    if name then
      listed_loops[#listed_loops + 1] = name
    end
    local data = (res and res.data) or {}
    if name then
      util.notify(('loop %s started on branch %s: :Forge status %s'):format(name, tostring(data.branch or '?'), name))
    else
      util.notify((res and res.text) or 'started')
    end
  end)
end

function M.cancel(client, name)
  clients.exec(client, 'forge.loop-cancel', name and { name = name } or nil, function(err, res)
    if err then
      return fail('loop-cancel', err)
    end
    util.notify(first_line(res and res.text, 'cancelled'))
  end)
end

function M.restart(client, name, force)
  if not name then
    util.error('restart needs a loop name: :Forge restart {loop} (:Forge restart! {loop} for a running loop).')
    return
  end
  local input = { name = name, restart = true }
  if force then
    input.force = true
  end
  clients.exec(client, 'forge.loop-status', input, function(err, res)
    if err then
      return fail('loop-status restart', err)
    end
    util.notify(first_line(res and res.text, 'loop ' .. name .. ' restarting'))
  end)
end

--- :Forge status [loop] — opens a loop's status document (the only known loop by default).
function M.status(client, name)
  if not name then
    local names = loops.names()
    if #names == 1 then
      name = names[1]
    else
      util.error('which loop? :Forge status {loop} (' .. (#names == 0 and 'no loop known' or table.concat(names, ', ')) .. ')')
      return
    end
  end
  documents.open(('forge://loop/%s/status.md'):format(name), nil, client)
end

function M.info(client)
  local lines = {
    'forge-lsp client ' .. client.id .. ' (' .. tostring(client.name) .. ')',
    'root: ' .. tostring(clients.root(client)),
    'session: ' .. tostring(clients.session_id(client)),
    'server: ' .. vim.inspect(client.server_info or vim.NIL),
    'command: ' .. table.concat(options.cmd(), ' '),
    'loops: ' .. (loops.statusline() ~= '' and loops.statusline() or 'none running'),
    'log: ' .. vim.lsp.get_log_path(),
  }
  util.notify(table.concat(lines, '\n'))
end

M.subcommands = {
  findings = { run = M.findings, desc = 'findings in the quickfix list' },
  plans = { run = M.plans, desc = 'recent plans in the quickfix list' },
  loops = { run = M.list_loops, desc = 'loops in the quickfix list' },
  plan = { run = M.plan, desc = 'open the session plan' },
  execute = { run = M.execute, desc = 'execute the session plan as a loop', rest = true },
  cancel = { run = M.cancel, desc = 'cancel a loop', loop = true },
  restart = { run = M.restart, desc = 'restart a loop (! for a running one)', loop = true },
  status = { run = M.status, desc = "open a loop's status document", loop = true },
  index = {
    run = function(client)
      documents.open('forge://index.md', nil, client)
    end,
    desc = 'open forge://index.md',
  },
  info = { run = M.info, desc = 'client, session and log' },
  start = { desc = 'start the server for the current project', no_client = true },
  stop = { desc = 'stop the servers', no_client = true },
}

local function start_cmd()
  local buf = vim.api.nvim_get_current_buf()
  if clients.attach(buf) then
    return
  end
  local root = clients.buf_root(buf) or clients.cwd_root()
  if not root then
    util.error('not inside a git repository: open a file of the project or :cd into it.')
    return
  end
  if clients.start_detached(root) then
    util.notify('forge-lsp started for ' .. root)
  end
end

local function stop_cmd()
  for _, c in ipairs(clients.clients()) do
    util.stop(c)
  end
end

function M.run(opts)
  local args = opts.fargs
  local sub = args[1]
  if not sub or sub == '' then
    sub = 'info'
  end
  local def = M.subcommands[sub]
  if not def then
    local subs = vim.tbl_keys(M.subcommands)
    table.sort(subs)
    util.error(('unknown subcommand %q; one of: %s'):format(sub, table.concat(subs, ', ')))
    return
  end
  if sub == 'start' then
    return start_cmd()
  elseif sub == 'stop' then
    return stop_cmd()
  end
  local client = clients.ensure(0)
  if not client then
    return
  end
  local arg
  if def.rest then
    arg = #args > 1 and table.concat(args, ' ', 2) or nil
  else
    arg = args[2]
  end
  if sub == 'restart' then
    return M.restart(client, arg, opts.bang)
  end
  return def.run(client, arg)
end

function M.complete(arglead, cmdline, _)
  local words = vim.split(cmdline, '%s+', { trimempty = false })
  -- words[1] is "Forge" (or "Forge!"), the last word is the one being completed.
  if #words <= 2 then
    local subs = vim.tbl_keys(M.subcommands)
    table.sort(subs)
    return vim.tbl_filter(function(s)
      return vim.startswith(s, arglead)
    end, subs)
  end
  local def = M.subcommands[words[2]]
  if def and def.loop and #words == 3 then
    local names, seen = {}, {}
    for _, n in ipairs(vim.list_extend(loops.names(), listed_loops)) do
      if not seen[n] and vim.startswith(n, arglead) then
        seen[n] = true
        names[#names + 1] = n
      end
    end
    return names
  end
  return {}
end

function M.setup()
  vim.api.nvim_create_user_command('Forge', M.run, {
    nargs = '*',
    bang = true,
    complete = M.complete,
    desc = 'Forge: findings, plans, loops, execute, cancel, restart, plan, status, index, info, start, stop',
  })
end

return M
