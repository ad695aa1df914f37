-- Bad input: a missing binary, a server that fails to start, a server that dies, a
-- repository without commits and wrong :Forge arguments each give a clear vim.notify,
-- never a hang or a stack trace.
-- Environment: FORGE_TEST_OUT, FORGE_TEST_ROOT (holds repo/, nocommit/, bin/).
local H = dofile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'test', 'helpers.lua'))
local check, wait = H.check, H.wait
local root = assert(os.getenv('FORGE_TEST_ROOT'))
local forge = require('forge')
local clients = require('forge.client')
local ERROR, WARN = vim.log.levels.ERROR, vim.log.levels.WARN

local function reset()
  for _, c in ipairs(clients.clients()) do
    require('forge.util').stop(c, true)
  end
  wait(3000, function()
    return #clients.clients() == 0
  end)
  vim.cmd('silent! %bwipeout!')
  H.messages = {}
end

local function no_traceback()
  for _, m in ipairs(H.messages) do
    if m.msg:find('stack traceback', 1, true) or m.msg:find('E5108', 1, true) then
      return false, m.msg
    end
  end
  -- Errors Neovim reports itself (an error in a callback) land in :messages.
  local messages = vim.fn.execute('messages')
  if messages:find('stack traceback', 1, true) or messages:find('Error executing', 1, true) then
    return false, messages
  end
  return true
end

local function msgs()
  return vim.tbl_map(function(m)
    return { level = m.level, msg = m.msg }
  end, H.messages)
end

--- How many messages, of any level, match `pat`.
local function count(pat)
  local n = 0
  for _, m in ipairs(H.messages) do
    if m.msg:find(pat) then
      n = n + 1
    end
  end
  return n
end

--- One message about a server's exit: Neovim's own "Client … quit with exit code" warning
--- is left out, as ours says the same and how to restart (a review counted two).
local function one_exit_message(ours)
  vim.wait(1200)
  return count('quit with exit code') == 0 and count(ours) == 1
end

local function has(level, pat)
  for _, m in ipairs(H.messages) do
    if m.level == level and m.msg:find(pat) then
      return true
    end
  end
  return false
end

--- A git repository `root/<name>` with one commit (its file `<name>.txt`).
local function new_repo(name)
  local dir = root .. '/' .. name
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile({ name }, dir .. '/' .. name .. '.txt')
  for _, args in ipairs({
    { 'git', 'init', '-q' },
    { 'git', 'add', '.' },
    { 'git', '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-qm', 'init' },
  }) do
    vim.system(args, { cwd = dir }):wait()
  end
  return dir
end

H.run(function()
  -- 1. Missing binary.
  forge.setup({ cmd = { root .. '/bin/no-such-forge-lsp' } })
  local t0 = vim.uv.hrtime()
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  wait(1000, function()
    return has(ERROR, 'not an executable')
  end)
  check(
    'missing binary: an error names the command and how to set it, no client',
    has(ERROR, "no%-such%-forge%-lsp' is not an executable file %(no such file%)") and has(ERROR, 'cmd =') and #clients.clients() == 0,
    msgs()
  )
  check('missing binary: no stack trace', no_traceback(), msgs())
  -- Each command says why it did nothing (review YQ: after the first message, every
  -- command was silent).
  H.messages = {}
  vim.cmd('Forge findings')
  wait(1000, function()
    return has(ERROR, 'not an executable')
  end)
  check('missing binary: :Forge findings explains instead of hanging', has(ERROR, 'not an executable') and (vim.uv.hrtime() - t0) / 1e6 < 5000, msgs())
  H.messages = {}
  vim.cmd('Forge plans')
  wait(1000, function()
    return has(ERROR, 'not an executable')
  end)
  vim.wait(200)
  check('missing binary: the next command explains too', count('not an executable') == 1, msgs())

  -- 2. A repository without commits.
  reset()
  forge.setup({ cmd = { 'forge-lsp' } })
  vim.cmd('edit ' .. root .. '/nocommit/a.txt')
  wait(1000, function()
    return has(WARN, 'no commits')
  end)
  check('no commits: a warning says to commit first, no client', has(WARN, 'nocommit has no commits yet') and #clients.clients() == 0, msgs())
  check('no commits: no stack trace', no_traceback(), msgs())

  -- 3. A server that exits at once.
  reset()
  forge.setup({ cmd = { root .. '/bin/crash-forge-lsp' } })
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  wait(5000, function()
    return has(ERROR, 'failed to start')
  end)
  check('server exits at start: an error with the exit code', has(ERROR, 'forge%-lsp failed to start %(exit code 3%)'), msgs())
  check('server exits at start: no stack trace', no_traceback(), msgs())
  check('server exits at start: one message', one_exit_message('failed to start'), msgs())

  -- 4. A server that dies while in use.
  reset()
  forge.setup({ cmd = { root .. '/bin/killable-forge-lsp' } })
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  local buf = vim.api.nvim_get_current_buf()
  local up = wait(10000, function()
    local c = forge.client(buf)
    return c and c.initialized
  end)
  check('killable server starts', up, msgs())
  -- A second file of the project and a session plan, open when the server dies.
  vim.cmd('edit ' .. root .. '/repo/other.txt')
  local other = vim.api.nvim_get_current_buf()
  local first = forge.client(buf)
  local sid = clients.session_id(first)
  local _, werr = clients.exec_sync(first, 'forge.plan-write', { content = '# Crash plan\n\n## Phase 1: before\n', session_id = sid })
  check('a plan stored before the crash', werr == nil, werr)
  local plan_uri = ('forge://plan/session/%s.md'):format(sid)
  vim.cmd('edit ' .. plan_uri)
  local planbuf = vim.api.nvim_get_current_buf()
  check('the plan buffer shows the stored plan', H.buf_text(planbuf):find('Phase 1: before', 1, true) ~= nil, H.buf_text(planbuf))
  vim.cmd('buffer ' .. buf)
  local pidfile = io.open(root .. '/killable.pid')
  local pid = pidfile and tonumber(pidfile:read('*l'))
  if pidfile then
    pidfile:close()
  end
  if pid then
    vim.uv.kill(pid, 'sigkill')
  end
  wait(5000, function()
    return has(ERROR, 'stopped unexpectedly')
  end)
  check('server killed: an error says it stopped and how to restart', has(ERROR, 'stopped unexpectedly.*signal 9.*:Forge start'), msgs())
  check('server killed: no stack trace', no_traceback(), msgs())
  check('server killed: one message', one_exit_message('stopped unexpectedly'), msgs())
  check('server killed: vim.notify is Neovim\'s again', vim.notify == H.notify, tostring(vim.notify))
  -- Meanwhile the plan is edited from a shell (an agent, another terminal).
  local function shell_edit(old, new)
    local input = vim.json.encode({ oldString = old, newString = new })
    local out = vim.fn.system({ 'sh', '-c', 'cd "$1" && forge-lsp call plan-edit --session "$2" "$3"', 'sh', root .. '/repo', sid, input })
    return vim.v.shell_error == 0, out
  end
  -- The plan stored for a session, as `forge-lsp call plan-read` prints it.
  local function stored_plan(session)
    return vim.fn.system({ 'sh', '-c', 'cd "$1" && forge-lsp call plan-read --session "$2" "{}"', 'sh', root .. '/repo', session })
  end
  local OTHER = 'ses_01NVIMOTHERPLAN000000000'
  local OTHER_URI = ('forge://plan/session/%s.md'):format(OTHER)
  -- Runs an Ex command that should fail, and waits until its error (matching `pat`) is shown.
  local function refused(cmd, pat)
    H.messages = {}
    pcall(vim.cmd, cmd)
    wait(3000, function()
      return has(ERROR, pat)
    end)
    return has(ERROR, pat)
  end
  local edited, out = shell_edit('Phase 1: before', 'Phase 1: while down')
  check('the plan edited from a shell while the server is down', edited, out)
  H.messages = {}
  local t1 = vim.uv.hrtime()
  vim.cmd('Forge start')
  local restarted = wait(10000, function()
    local c = forge.client(buf)
    return c and c.initialized
  end)
  check(':Forge start restarts the server for the buffer', restarted and (vim.uv.hrtime() - t1) / 1e6 < 10000, msgs())
  local new = forge.client(buf)
  -- Every file buffer of the project is the new server's, not only the current one
  -- (before: only it; the other kept its diagnostics but lost its code actions).
  local both = wait(5000, function()
    return new and new.attached_buffers[buf] and new.attached_buffers[other]
  end)
  check('after a restart every file buffer of the project is attached again', both, { buf = buf, other = other })
  -- The plan buffer reads what was stored while the server was down (before: the old
  -- text stayed, and :w undid the shell's edit without a word).
  local reread = wait(5000, function()
    return H.buf_text(planbuf):find('Phase 1: while down', 1, true) ~= nil
  end)
  check('after a restart the plan buffer is read again', reread, H.buf_text(planbuf))
  -- A buffer edited here while the stored plan changes elsewhere is not saved over it:
  -- :w refuses, naming :e! and :w!; :w! saves.
  vim.cmd('buffer ' .. planbuf)
  vim.api.nvim_buf_set_lines(planbuf, -1, -1, false, { '- my edit' })
  edited, out = shell_edit('Phase 1: while down', 'Phase 1: elsewhere')
  check('the plan edited from a shell again', edited, out)
  wait(3000, function()
    return has(WARN, 'unsaved edits')
  end)
  local refused_w = refused('write', 'was changed since this buffer read it')
  local stored = stored_plan(sid)
  check(':w of a buffer older than the stored plan is refused', refused_w and stored:find('Phase 1: elsewhere', 1, true) ~= nil and not stored:find('my edit', 1, true), { msgs = msgs(), stored = stored })
  vim.cmd('silent! write!')
  stored = stored_plan(sid)
  check(':w! saves it over the stored plan', stored:find('my edit', 1, true) ~= nil, stored)
  -- Writing the buffer to another plan's name is no save of this one: not compared.
  H.messages = {}
  pcall(vim.cmd, 'write ' .. OTHER_URI)
  stored = stored_plan(OTHER)
  check(':w to another plan name stores it there, unrefused', stored:find('my edit', 1, true) ~= nil and not has(ERROR, 'was changed since'), { msgs = msgs(), stored = stored })
  -- That name now holds a plan: writing another text over it needs ! (as :w needs it for
  -- an existing file); a line range is refused (a plan is stored whole).
  vim.api.nvim_buf_set_lines(planbuf, -1, -1, false, { '- second edit' })
  local refused_other = refused('write ' .. OTHER_URI, 'holds another plan')
  stored = stored_plan(OTHER)
  check(':w over another stored plan needs !', refused_other and not stored:find('second edit', 1, true), { msgs = msgs(), stored = stored })
  pcall(vim.cmd, 'write! ' .. OTHER_URI)
  stored = stored_plan(OTHER)
  check(':w! writes over it', stored:find('second edit', 1, true) ~= nil, stored)
  local refused_range = refused('1,1write! ' .. OTHER_URI, 'saved whole')
  stored = stored_plan(OTHER)
  check('a line range is not written as the whole plan', refused_range and stored:find('second edit', 1, true) ~= nil, { msgs = msgs(), stored = stored })
  vim.cmd('buffer ' .. buf)

  -- 5. Wrong :Forge arguments against a running server.
  H.messages = {}
  vim.cmd('Forge nosuch')
  vim.wait(200)
  check(':Forge with an unknown subcommand lists the valid ones', has(ERROR, 'unknown subcommand "nosuch"'), msgs())
  vim.cmd('Forge cancel no-such-loop')
  wait(3000, function()
    return has(ERROR, 'loop%-cancel')
  end)
  check(':Forge cancel of an unknown loop shows the server error', has(ERROR, 'loop%-cancel: '), msgs())
  vim.cmd('Forge restart')
  vim.wait(200)
  check(':Forge restart without a loop says it needs one', has(ERROR, 'restart needs a loop name'), msgs())
  vim.cmd('edit forge://no/such/document.md')
  vim.wait(200)
  check('an unknown forge:// document gives an error, not an empty buffer in silence', has(ERROR, 'cannot open forge://no/such/document.md'), msgs())
  check('wrong arguments: no stack trace', no_traceback(), msgs())

  -- 6. A loop that cannot start (no agent command configured here).
  H.messages = {}
  local announced = {}
  vim.api.nvim_create_autocmd('User', {
    pattern = 'ForgeLoopStatus',
    callback = function(ev)
      table.insert(announced, { loopName = ev.data.loopName, status = ev.data.status })
    end,
  })
  vim.cmd('Forge plan')
  vim.bo.modifiable = true
  vim.api.nvim_buf_set_lines(0, 0, -1, false, {
    '# No agent',
    '',
    '## Objective',
    'Nothing.',
    '',
    'Loop Name: no-agent',
    '',
    '<!-- forge-section -->',
    '## Phase 1: Nothing',
    '- nothing',
  })
  vim.cmd('write')
  vim.cmd('Forge execute')
  wait(5000, function()
    return has(ERROR, 'execute%-plan: ')
  end)
  vim.wait(500)
  local l = forge.loops()['no-agent']
  H.note('failed_start_loop_status', announced)
  check('a loop that cannot start: the server error is shown', has(ERROR, 'execute%-plan: '), msgs())
  check('a loop that cannot start: no phantom running loop in the statusline', forge.statusline() == '' and (l == nil or l.status ~= 'running'), {
    statusline = forge.statusline(),
    loop = l,
  })
  check('a loop that cannot start: no stack trace', no_traceback(), msgs())

  -- 7. A loop whose agent command does not exist.
  reset()
  forge.setup({
    cmd = { 'forge-lsp' },
    config = { agent = { command = { root .. '/bin/no-such-agent' } }, sandbox = { enabled = false } },
  })
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  wait(10000, function()
    local c = forge.client(0)
    return c and c.initialized
  end)
  vim.cmd('Forge plan')
  vim.api.nvim_buf_set_lines(0, 0, -1, false, {
    '# Missing agent',
    '',
    '## Objective',
    'Nothing.',
    '',
    'Loop Name: missing-agent',
    '',
    '<!-- forge-section -->',
    '## Phase 1: Nothing',
    '- nothing',
  })
  vim.cmd('write')
  announced = {}
  vim.cmd('Forge execute')
  local ended = wait(15000, function()
    local m = forge.loops()['missing-agent']
    return (m and m.status ~= 'running') or has(ERROR, 'execute%-plan: ')
  end)
  vim.wait(300)
  local m = forge.loops()['missing-agent']
  H.note('missing_agent_loop_status', announced)
  H.note('missing_agent_messages', msgs())
  check('a loop whose agent command is missing: no stack trace', no_traceback(), msgs())
  check('a loop whose agent command is missing ends visibly (error or a loop-end warning), not a phantom running loop', ended
    and forge.statusline() == ''
    and (has(ERROR, 'execute%-plan: ') or has(WARN, 'Forge: loop missing%-agent')), {
    statusline = forge.statusline(),
    loop = m,
    messages = msgs(),
  })

  -- 8. A configuration value of the wrong type: initialize fails.
  reset()
  forge.setup({ cmd = { 'forge-lsp' }, config = { loop = { defaultMaxIterations = 'many' } } })
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  wait(5000, function()
    return has(ERROR, 'refused to start')
  end)
  check('a wrong configuration value: the server\'s message names the key', has(ERROR, 'refused to start: .*loop%.defaultMaxIterations'), msgs())
  check('a wrong configuration value: no stack trace (Neovim asserts on initialize errors)', no_traceback(), msgs())

  -- 9. A stored session the server refuses (a loop's session, without its token).
  reset()
  forge.setup({ cmd = { 'forge-lsp' }, config = {} })
  local st = vim.system({ 'forge-lsp', 'call', 'loop-status', '{"name":"nvim-test"}', '--json' }, { cwd = root .. '/repo', text = true }):wait(10000)
  local ok_json, status = pcall(vim.json.decode, st.stdout or '')
  local loop_session = ok_json and vim.tbl_get(status, 'data', 'sessionId') or nil
  if type(loop_session) ~= 'string' then
    check('a refused stored session: the loop session id is readable (needs the scenario run first)', false, st)
  else
    local path = vim.fs.joinpath(vim.fn.stdpath('data'), 'forge', 'sessions.json')
    vim.fn.mkdir(vim.fs.dirname(path), 'p')
    vim.fn.writefile({ vim.json.encode({ [root .. '/repo'] = loop_session }) }, path)
    vim.cmd('edit ' .. root .. '/repo/notes.txt')
    wait(5000, function()
      return has(ERROR, 'refused to start')
    end)
    check('a refused stored session: the error says it is forgotten', has(ERROR, 'refused to start: .*stored session is forgotten'), msgs())
    check('a refused stored session: no stack trace', no_traceback(), msgs())
    vim.cmd('bwipeout!')
    vim.cmd('edit ' .. root .. '/repo/notes.txt')
    local fresh = wait(10000, function()
      local c = forge.client(0)
      return c and c.initialized
    end)
    local c = forge.client(0)
    local sid = c and clients.session_id(c)
    check('a refused stored session: reopening starts with a fresh session', fresh and sid ~= nil and sid ~= loop_session, { sid = sid, loop_session = loop_session })
  end

  -- 10. Two projects: a forge:// document a command opens comes from the server of the
  -- project the command ran in (before: from the first server or the working
  -- directory's), and a mistyped session id is an error, not a new empty plan.
  reset()
  forge.setup({ cmd = { 'forge-lsp' }, config = {} })
  local two = new_repo('two')
  local function started(dir)
    local real = vim.uv.fs_realpath(dir)
    return wait(10000, function()
      local c = forge.client(0)
      return c and c.initialized and vim.uv.fs_realpath(c.root_dir or '') == real
    end)
  end
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  started(root .. '/repo')
  vim.cmd('edit ' .. two .. '/two.txt')
  check('two projects: each has its server', started(two), vim.tbl_map(function(c)
    return c.root_dir
  end, clients.clients()))
  local b = forge.client(0)
  local sid = b and clients.session_id(b)
  -- The working directory in the other project (whose server the read fell back to).
  local cwd = vim.fn.getcwd()
  vim.cmd('cd ' .. vim.fn.fnameescape(root .. '/repo'))
  vim.cmd('Forge plan')
  local planbuf = vim.api.nvim_get_current_buf()
  check('two projects: :Forge plan opens this project\'s session plan, empty and writable', vim.bo[planbuf].modifiable
    and vim.b[planbuf].forge_client == (b and b.id), { modifiable = vim.bo[planbuf].modifiable, client = vim.b[planbuf].forge_client, b = b and b.id })
  vim.bo[planbuf].modifiable = true
  vim.api.nvim_buf_set_lines(planbuf, 0, -1, false, { '# Plan of two', '', '## Objective', 'Two.' })
  vim.cmd('write')
  vim.wait(500)
  local function stored_in(dir)
    local r = vim.system({ 'forge-lsp', 'call', 'plan-read', '--session', sid or '', '{}' }, { cwd = dir, text = true }):wait(10000)
    return (r.stdout or ''):find('Plan of two', 1, true) ~= nil, { code = r.code, out = r.stdout, err = r.stderr }
  end
  local in_two, in_repo = stored_in(two)
  local in_other, other_out = stored_in(root .. '/repo')
  vim.cmd('cd ' .. vim.fn.fnameescape(cwd))
  check('two projects: :w stores the plan in that project, not the other', sid ~= nil and in_two and not in_other, { two = in_repo, other = other_out, sid = sid })
  H.messages = {}
  vim.cmd('buffer ' .. vim.fn.bufnr(two .. '/two.txt'))
  vim.cmd('Forge plan ses_01TYPOTYPOTYPOTYPOTYPOTYP')
  vim.wait(300)
  check('a mistyped session id: an error and a read-only buffer, not a new plan', has(ERROR, 'cannot open forge://plan/session/ses_01TYPO')
    and not vim.bo.modifiable, { messages = msgs(), modifiable = vim.bo.modifiable })

  -- A command run in a project whose server has not started yet, or cannot start (no
  -- commit), never runs against another project's server (before: the first one's; a
  -- review found :Forge execute started a loop in the other project).
  local three = new_repo('three')
  local real_three = vim.uv.fs_realpath(three)
  vim.cmd('edit ' .. three .. '/three.txt')
  local first = forge.client(0)
  check('a third project, at once: no other project\'s client serves its buffer', first == nil
    or vim.uv.fs_realpath(first.root_dir or '') == real_three, first and first.root_dir)
  vim.cmd('Forge plan')
  local three_plan = vim.api.nvim_get_current_buf()
  local served = vim.b[three_plan].forge_client and vim.lsp.get_client_by_id(vim.b[three_plan].forge_client)
  check('a third project, at once: :Forge plan opens its own server\'s plan', served ~= nil
    and vim.uv.fs_realpath(served.root_dir or '') == real_three, served and served.root_dir)
  -- The plan's server dies while the working directory is another project's: the plan
  -- buffer's commands go to its own project (a new server), never the other's (a review
  -- found its :w! stored the plan in the working directory's project).
  local three_client = served
  -- Killed (SIGKILL), as a crash: the server process whose working directory is three.
  for _, dir in ipairs(vim.fn.glob('/proc/[0-9]*', false, true)) do
    local comm = (vim.fn.readfile(dir .. '/comm')[1] or '')
    if comm:find('forge', 1, true) and vim.uv.fs_realpath(dir .. '/cwd') == real_three then
      vim.uv.kill(tonumber(dir:match('%d+$')), 'sigkill')
    end
  end
  wait(5000, function()
    return three_client == nil or require('forge.util').is_stopped(three_client)
  end)
  vim.wait(300)
  local saved_cwd = vim.fn.getcwd()
  vim.cmd('cd ' .. vim.fn.fnameescape(root .. '/repo'))
  vim.api.nvim_set_current_buf(three_plan)
  local again = clients.ensure(three_plan)
  check('a plan whose server died: its commands go to its own project, not the working directory\'s', again ~= nil
    and vim.uv.fs_realpath(again.root_dir or '') == real_three,
    { root = again and again.root_dir, stopped = three_client and require('forge.util').is_stopped(three_client),
      same = again == three_client })
  vim.cmd('cd ' .. vim.fn.fnameescape(saved_cwd))
  H.messages = {}
  vim.cmd('edit ' .. root .. '/nocommit/a.txt')
  vim.fn.setqflist({}, 'r')
  vim.cmd('Forge findings')
  vim.wait(500)
  check('a project without commits: no client, and :Forge findings lists no other project\'s findings',
    forge.client(0) == nil and #vim.fn.getqflist() == 0 and has(ERROR, 'has no commits yet'),
    { qf = #vim.fn.getqflist(), messages = msgs() })

  -- setup() naming another client after the plugin enabled the default (lazy.nvim's
  -- order): one server per buffer, under the new name (before: both, every finding twice).
  reset()
  forge.setup({ cmd = { 'forge-lsp' }, config = {}, name = 'forge_renamed' })
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  local function by_name()
    local n = {}
    for _, c in ipairs(vim.lsp.get_clients({ bufnr = 0 })) do
      n[c.name] = (n[c.name] or 0) + 1
    end
    return n
  end
  wait(10000, function()
    local c = forge.client(0)
    return c and c.initialized and #vim.diagnostic.get(0) > 0
  end)
  vim.wait(500)
  local seen = by_name()
  check('setup({ name }) after the plugin enabled the default: one client, the new name\'s', seen.forge_renamed == 1
    and seen.forge_lsp == nil and #vim.diagnostic.get(0) == 1, { clients = seen, diagnostics = #vim.diagnostic.get(0) })
  reset()
  forge.setup({ cmd = { 'forge-lsp' }, config = {}, name = 'forge_lsp' })

  -- A plan stored with CRLF line ends (written on Windows, or by an agent that does) opens
  -- without a ^M on every line, and :w keeps its line ends (before: ^M everywhere).
  reset()
  forge.setup({ cmd = { 'forge-lsp' }, config = {} })
  local crlf_sid = 'ses_01CRLFCRLFCRLFCRLFCRLFCR'
  local wrote = vim.system({ 'forge-lsp', 'call', 'plan-write', '--session', crlf_sid,
    vim.json.encode({ content = '# CRLF plan\r\n\r\n## Objective\r\nKeep the ends.\r\n' }) },
    { cwd = root .. '/repo', text = true }):wait(10000)
  vim.cmd('edit ' .. root .. '/repo/notes.txt')
  wait(10000, function()
    local c = forge.client(0)
    return c and c.initialized
  end)
  vim.cmd('edit forge://plan/session/' .. crlf_sid .. '.md')
  local crlf_buf = vim.api.nvim_get_current_buf()
  wait(5000, function()
    return vim.api.nvim_buf_get_lines(crlf_buf, 0, 1, false)[1] ~= ''
  end)
  local shown = vim.api.nvim_buf_get_lines(crlf_buf, 0, -1, false)
  check('a CRLF plan opens without ^M, as a dos buffer', wrote.code == 0 and shown[1] == '# CRLF plan'
    and not table.concat(shown, '\n'):find('\r', 1, true) and vim.bo[crlf_buf].fileformat == 'dos',
    { wrote = wrote.stderr, lines = shown, ff = vim.bo[crlf_buf].fileformat })
  vim.bo[crlf_buf].modifiable = true
  vim.bo[crlf_buf].readonly = false
  vim.api.nvim_buf_set_lines(crlf_buf, 3, 4, false, { 'Keep the ends, edited.' })
  vim.cmd('write!')
  vim.wait(300)
  local stored = vim.system({ 'forge-lsp', 'call', '--json', 'plan-read', '--session', crlf_sid, '{}' },
    { cwd = root .. '/repo', text = true }):wait(10000)
  local ok_json, read = pcall(vim.json.decode, stored.stdout or '')
  local content = ok_json and read.text or ''
  -- A refresh that changes the plan's line ends sends the server the stored text: its
  -- symbols are where the buffer has them (before, the old line ends were sent, and the
  -- symbols were on the wrong lines under the wrong names).
  local crlf_client = forge.client(crlf_buf)
  vim.system({ 'forge-lsp', 'call', 'plan-write', '--session', crlf_sid,
    vim.json.encode({ content = '# LF plan\r\n\r\n## Objective\nNow mixed.\r\n\r\n<!-- forge-section -->\n## Phase 1: A\r\nDo a.\n' }) },
    { cwd = root .. '/repo', text = true }):wait(10000)
  wait(5000, function()
    return (vim.api.nvim_buf_get_lines(crlf_buf, 0, 1, false)[1] or ''):find('# LF plan', 1, true) == 1
  end)
  vim.wait(300)
  local symbols = crlf_client and vim.lsp.buf_request_sync(crlf_buf, 'textDocument/documentSymbol',
    { textDocument = { uri = vim.uri_from_bufnr(crlf_buf) } }, 5000) or {}
  local phase_line
  for _, r in pairs(symbols or {}) do
    for _, sym in ipairs(r.result or {}) do
      local function walk(x)
        if x.name:find('Phase 1: A', 1, true) then
          phase_line = (x.selectionRange or x.range or x.location.range).start.line
        end
        for _, c in ipairs(x.children or {}) do
          walk(c)
        end
      end
      walk(sym)
    end
  end
  local want_line
  for i, l in ipairs(vim.api.nvim_buf_get_lines(crlf_buf, 0, -1, false)) do
    if l:find('^## Phase 1: A') then
      want_line = i - 1
    end
  end
  check('a refresh from CRLF to mixed line ends: the server has the stored text (its symbols match the buffer)',
    vim.bo[crlf_buf].fileformat == 'unix' and phase_line ~= nil and phase_line == want_line,
    { ff = vim.bo[crlf_buf].fileformat, phase_line = phase_line, want = want_line, symbols = symbols })
  check(':w of a CRLF plan stores CRLF line ends',
    content:find('1: # CRLF plan\r\n2: \r\n3: ## Objective\r\n4: Keep the ends, edited.', 1, true) ~= nil,
    { content = content, out = stored.stdout, err = stored.stderr })

  -- The help file: tags generate (no duplicates) and :help finds them.
  local docdir = vim.fn.tempname()
  vim.fn.mkdir(docdir, 'p')
  vim.fn.writefile(vim.fn.readfile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'doc', 'forge.txt')), docdir .. '/forge.txt')
  local tags_ok, tags_err = pcall(vim.cmd, 'helptags ' .. vim.fn.fnameescape(docdir))
  local tags = tags_ok and vim.fn.readfile(docdir .. '/tags') or {}
  check('doc/forge.txt: :helptags succeeds and defines the command tags', tags_ok and vim.iter(tags):any(function(t)
    return vim.startswith(t, ':Forge\t')
  end) and vim.iter(tags):any(function(t)
    return vim.startswith(t, 'forge-statusline\t')
  end), { err = tags_err, tags = tags })
end)
