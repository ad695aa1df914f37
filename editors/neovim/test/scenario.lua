-- The main scenario, against the real forge-lsp: findings shown, file closed and reopened,
-- forge:// documents, a loop with a scripted agent (statusline, notify, progress, refresh),
-- the :Forge commands, and a finding deleted by code action.
-- Environment: FORGE_TEST_OUT, FORGE_TEST_REPO (cwd), FORGE_TEST_MODE (full|legacy).
local H = dofile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'test', 'helpers.lua'))
local check, wait, note = H.check, H.wait, H.note

local repo = assert(os.getenv('FORGE_TEST_REPO'))
local mode = os.getenv('FORGE_TEST_MODE') or 'full'
local forge = require('forge')
local LOOP_WAIT = tonumber(os.getenv('FORGE_TEST_LOOP_WAIT') or '25000')

-- What the test saw of loops and progress.
local statuslines, statuses, progress = {}, {}, {}
vim.api.nvim_create_autocmd('User', {
  pattern = 'ForgeLoopStatus',
  callback = function(ev)
    table.insert(statuses, { loopName = ev.data.loopName, status = ev.data.status, phase = ev.data.phase })
    table.insert(statuslines, forge.statusline())
  end,
})
vim.api.nvim_create_autocmd('LspProgress', {
  callback = function(ev)
    local p = ev.data and ev.data.params or {}
    local v = p.value or {}
    table.insert(progress, { token = p.token, kind = v.kind, title = v.title, message = v.message })
  end,
})
local refreshed = {}
vim.api.nvim_create_autocmd('User', {
  pattern = 'ForgeDocumentRefreshed',
  callback = function(ev)
    refreshed[ev.data.uri] = (refreshed[ev.data.uri] or 0) + 1
  end,
})

local function qf()
  local q = vim.fn.getqflist({ title = 1, items = 1 })
  local items = {}
  for _, it in ipairs(q.items) do
    items[#items + 1] = {
      file = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(it.bufnr), ':.'),
      lnum = it.lnum,
      type = it.type,
      text = it.text,
    }
  end
  return q.title, items
end

local function run_qf_command(cmd, title)
  vim.fn.setqflist({}, ' ', { title = 'before ' .. cmd, items = {} })
  vim.cmd(cmd)
  wait(5000, function()
    return vim.fn.getqflist({ title = 1 }).title == title
  end)
  pcall(vim.cmd, 'cclose')
  return qf()
end

local function forge_clients()
  return require('forge.client').clients()
end

local function diag_summary(ds)
  return vim.tbl_map(function(d)
    return { lnum = d.lnum, severity = d.severity, message = d.message, code = d.code }
  end, ds)
end

H.run(function()
  -- The session id a previous Neovim stored for this project (the legacy run ran first).
  local stored_session
  local sf = io.open(vim.fs.joinpath(vim.fn.stdpath('data'), 'forge', 'sessions.json'))
  if sf then
    stored_session = (vim.json.decode(sf:read('*a')) or {})[repo]
    sf:close()
  end

  ---------------------------------------------------------------- start, findings
  vim.cmd('edit notes.txt')
  local notes = vim.api.nvim_get_current_buf()
  local started = wait(10000, function()
    local c = forge.client(notes)
    return c and c.initialized
  end)
  local client = forge.client(notes)
  check('forge-lsp starts for the git root and attaches the file', started and client and client.root_dir == repo, {
    started = started,
    root = client and client.root_dir,
  })
  if not client then
    error('no client: cannot go on')
  end
  local sid = require('forge.client').session_id(client)
  note('sessionId', sid)
  check('initialize reports the session id (capabilities.experimental.forge.sessionId)', type(sid) == 'string' and sid:match('^ses_') ~= nil, sid)
  if mode == 'full' then
    check('the session is kept across Neovim restarts (the previous run\'s session id)', stored_session ~= nil and stored_session == sid, {
      stored = stored_session,
      now = sid,
    })
  end

  wait(5000, function()
    return #H.forge_diagnostics(notes) > 0
  end)
  local ds = H.forge_diagnostics(notes)
  note('diagnostics_first_open', diag_summary(ds))
  check(
    'findings shown on open (line 2, error, description)',
    #ds == 1 and ds[1].lnum == 1 and ds[1].severity == vim.diagnostic.severity.ERROR and ds[1].message:find('Line two is wrong', 1, true) ~= nil,
    diag_summary(ds)
  )

  local title, items = run_qf_command('Forge findings', 'Forge findings')
  note('quickfix_findings', items)
  check(
    ':Forge findings fills the quickfix list from review-read',
    title == 'Forge findings'
      and #items == 2
      and items[1].file == 'notes.txt' and items[1].lnum == 2 and items[1].type == 'E'
      and items[2].file == 'other.txt' and items[2].lnum == 1 and items[2].type == 'W',
    { title = title, items = items }
  )

  ---------------------------------------------------------------- close and reopen
  vim.cmd('bdelete ' .. notes)
  vim.cmd('edit notes.txt')
  notes = vim.api.nvim_get_current_buf()
  wait(3000, function()
    return #H.forge_diagnostics(notes) > 0
  end)
  ds = H.forge_diagnostics(notes)
  note('diagnostics_after_reopen', diag_summary(ds))
  check('findings still shown after the file is closed (:bdelete) and reopened', #ds == 1 and ds[1].lnum == 1, {
    after_reopen = diag_summary(ds),
    why = 'Neovim drops a client\'s diagnostics of a buffer when it detaches (:bdelete unloads it); '
      .. 'the server must publish them again on didOpen (PROTOCOL.md 10.2)',
  })

  if mode == 'legacy' then
    -- The Neovim 0.10 code path: a forge:// document, then done.
    vim.cmd('edit forge://index.md')
    local idx = vim.api.nvim_get_current_buf()
    check('legacy path: forge://index.md opens with text', H.buf_text(idx):find('#', 1, true) ~= nil, H.buf_text(idx))
    check('legacy path: one server only', #forge_clients() == 1, #forge_clients())
    vim.cmd('checkhealth forge')
    local health = H.buf_text(0)
    check(':checkhealth forge finds the server and the client', health:find('OK server:', 1, true) ~= nil
      and health:find('client %d+: root ' .. vim.pesc(repo)) ~= nil and not health:find('ERROR', 1, true), health)
    return
  end

  ---------------------------------------------------------------- forge:// documents
  local plan_uri = ('forge://plan/session/%s.md'):format(sid)
  vim.cmd('Forge plan')
  local planbuf = vim.api.nvim_get_current_buf()
  check(':Forge plan opens forge://plan/session/<sessionId>.md', vim.api.nvim_buf_get_name(planbuf) == plan_uri, vim.api.nvim_buf_get_name(planbuf))
  check('an empty session plan is editable (modifiable, acwrite)', vim.bo[planbuf].modifiable and vim.bo[planbuf].buftype == 'acwrite', {
    modifiable = vim.bo[planbuf].modifiable,
    buftype = vim.bo[planbuf].buftype,
  })
  local plan = {
    '# Neovim test plan',
    '',
    '## Objective',
    'Append a line to work.txt.',
    '',
    'Loop Name: nvim-test',
    '',
    '<!-- forge-section -->',
    '## Phase 1: Work file',
    '',
    '### Files',
    '- work.txt',
    '',
    '### Edits',
    '- append a line',
    '',
    '### Acceptance Criteria',
    '- work.txt has a line',
    '',
    '### Verification',
    '- cat work.txt',
  }
  vim.api.nvim_buf_set_lines(planbuf, 0, -1, false, plan)
  vim.cmd('write')
  wait(2000, function()
    return #H.messages_matching('Plan stored') > 0
  end)
  check(':w stores the session plan with forge.plan-write', #H.messages_matching('Plan stored') > 0 and not vim.bo[planbuf].modified, {
    modified = vim.bo[planbuf].modified,
    messages = vim.tbl_map(function(m) return m.msg end, H.messages_matching('lan')),
  })
  vim.cmd('bwipeout! ' .. planbuf)
  vim.cmd('edit ' .. plan_uri)
  planbuf = vim.api.nvim_get_current_buf()
  local got = vim.api.nvim_buf_get_lines(planbuf, 0, -1, false)
  note('plan_reopened', got)
  check('the reopened forge:// plan has the stored text', vim.deep_equal(got, plan), got)
  check('the forge:// buffer is attached to the project client (no second server)', client.attached_buffers[planbuf] and #forge_clients() == 1, {
    attached = client.attached_buffers[planbuf] or false,
    clients = #forge_clients(),
  })
  check('the plan buffer has filetype markdown', vim.bo[planbuf].filetype == 'markdown', vim.bo[planbuf].filetype)

  vim.cmd('split forge://index.md')
  local index = vim.api.nvim_get_current_buf()
  local index_text = H.buf_text(index)
  note('index', index_text)
  check('forge://index.md opens with a link to the session plan', index_text:find(plan_uri, 1, true) ~= nil, index_text)
  check('forge://index.md is read-only (nomodifiable)', not vim.bo[index].modifiable, vim.bo[index].modifiable)
  vim.cmd('close')

  local plans_title, plans = run_qf_command('Forge plans', 'Forge plans')
  note('quickfix_plans', plans)
  check(':Forge plans lists the session plan', plans_title == 'Forge plans' and vim.iter(plans):any(function(p)
    return p.file == plan_uri
  end), plans)

  ---------------------------------------------------------------- a loop
  vim.cmd('buffer ' .. planbuf)
  vim.cmd('Forge execute')
  local loop_name
  wait(10000, function()
    for _, s in ipairs(statuses) do
      if s.status == 'running' then
        loop_name = s.loopName
        return true
      end
    end
  end)
  note('loop_name', loop_name)
  check(':Forge execute starts a loop named by the plan\'s Loop Name (forge/loopStatus running)', loop_name == 'nvim-test', statuses)
  if loop_name then
    local status_uri = ('forge://loop/%s/status.md'):format(loop_name)
    vim.cmd('split ' .. vim.fn.fnameescape(status_uri))
    local status_buf = vim.api.nvim_get_current_buf()
    vim.cmd('wincmd p')
    note('status_doc_first', H.buf_text(status_buf))

    local ended = wait(LOOP_WAIT, function()
      local l = forge.loops()[loop_name]
      return l and l.status ~= 'running'
    end)
    local l = forge.loops()[loop_name] or {}
    note('loop_statuses', statuses)
    note('statuslines', statuslines)
    check('the loop completes (forge/loopStatus completed)', ended and l.status == 'completed', { status = l.status, reason = l.terminationReason })
    check(
      'the statusline component showed the running loop',
      vim.iter(statuslines):any(function(s)
        return s:find('Forge: ' .. loop_name, 1, true) ~= nil
      end),
      statuslines
    )
    check('the statusline component is empty once no loop runs', forge.statusline() == '', forge.statusline())
    wait(2000, function()
      return #H.messages_matching('Forge: loop ' .. loop_name .. ' completed') > 0
    end)
    vim.wait(300)
    local ends = H.messages_matching('Forge: loop ' .. vim.pesc(loop_name) .. ' completed')
    check('vim.notify tells the loop completed, once', #ends == 1, vim.tbl_map(function(m) return m.msg end, ends))
    local began, finished = false, false
    for _, p in ipairs(progress) do
      if p.kind == 'begin' and p.title == 'Forge: ' .. loop_name then
        began = true
      end
      if p.kind == 'end' then
        finished = true
      end
    end
    note('progress', progress)
    check('work-done progress reaches Neovim (LspProgress begin and end)', began and finished, progress)

    wait(3000, function()
      return H.buf_text(status_buf):find('completed', 1, true) ~= nil
    end)
    note('status_doc_last', H.buf_text(status_buf))
    check(
      'an open forge://loop/<name>/status.md is re-read on workspace/textDocumentContent/refresh',
      (refreshed[status_uri] or 0) > 0 and H.buf_text(status_buf):find('completed', 1, true) ~= nil,
      { refreshed = refreshed[status_uri], text = H.buf_text(status_buf) }
    )

    local loops_title, loop_items = run_qf_command('Forge loops', 'Forge loops')
    note('quickfix_loops', loop_items)
    check(':Forge loops lists the loop', loops_title == 'Forge loops' and #loop_items >= 1 and loop_items[1].text:find(loop_name, 1, true) ~= nil, loop_items)
    local compl = vim.fn.getcompletion('Forge cancel ', 'cmdline')
    check(':Forge cancel completes loop names', vim.tbl_contains(compl, loop_name), compl)
    local subs = vim.fn.getcompletion('Forge ', 'cmdline')
    check(':Forge completes its subcommands', vim.tbl_contains(subs, 'findings') and vim.tbl_contains(subs, 'restart'), subs)
    local before = #H.messages
    vim.cmd('Forge restart ' .. loop_name)
    wait(3000, function()
      return #H.messages > before
    end)
    local last = H.messages[#H.messages] or {}
    check(':Forge restart of a completed loop says why not (no stack trace)', #H.messages > before and last.level == vim.log.levels.ERROR and not last.msg:find('traceback', 1, true), last)
    vim.cmd('close')
  end

  ---------------------------------------------------------------- cancel and restart
  local hold = os.getenv('FORGE_TEST_HOLD')
  if hold then
    assert(io.open(hold, 'w')):close()
    vim.cmd('buffer ' .. planbuf)
    local plan2 = vim.deepcopy(plan)
    plan2[1] = '# Cancel test'
    plan2[6] = 'Loop Name: nvim-cancel'
    vim.api.nvim_buf_set_lines(planbuf, 0, -1, false, plan2)
    vim.cmd('write')
    vim.cmd('Forge execute')
    local running = wait(10000, function()
      local l = forge.loops()['nvim-cancel']
      return l and l.status == 'running'
    end)
    check('a held loop runs and the statusline shows it', running and forge.statusline():find('Forge: nvim-cancel', 1, true) ~= nil, {
      statusline = forge.statusline(),
      loop = forge.loops()['nvim-cancel'],
    })
    local compl = vim.fn.getcompletion('Forge cancel ', 'cmdline')
    check(':Forge cancel completes the running loop first', compl[1] == 'nvim-cancel', compl)
    vim.cmd('Forge cancel nvim-cancel')
    local cancelled = wait(10000, function()
      local l = forge.loops()['nvim-cancel']
      return l and l.status == 'cancelled'
    end)
    wait(2000, function()
      return #H.messages_matching('Forge: loop nvim%-cancel was cancelled') > 0
    end)
    vim.wait(300)
    check(':Forge cancel cancels it: status cancelled, one notification, statusline empty', cancelled
      and #H.messages_matching('Forge: loop nvim%-cancel was cancelled') == 1
      and forge.statusline() == '', {
      loop = forge.loops()['nvim-cancel'],
      statusline = forge.statusline(),
      messages = vim.tbl_map(function(m) return m.msg end, H.messages_matching('nvim%-cancel')),
    })
    os.remove(hold)
    vim.cmd('Forge restart nvim-cancel')
    local restarted = wait(LOOP_WAIT, function()
      local l = forge.loops()['nvim-cancel']
      return l and l.status == 'completed'
    end)
    wait(2000, function()
      return #H.messages_matching('Forge: loop nvim%-cancel completed') > 0
    end)
    check(':Forge restart restarts the cancelled loop, which then completes', restarted and #H.messages_matching('Forge: loop nvim%-cancel completed') == 1, {
      loop = forge.loops()['nvim-cancel'],
      messages = vim.tbl_map(function(m) return m.msg end, H.messages_matching('nvim%-cancel')),
    })
  end
  check('no .forge/view copies are materialized for this client (it reads forge:// itself)', vim.fn.isdirectory(repo .. '/.forge/view') == 0, vim.fn.glob(repo .. '/.forge/*'))

  -- A linked worktree of the repository (like a loop's worktree) is the same project.
  local wt = os.getenv('FORGE_TEST_WORKTREE')
  if wt then
    vim.cmd('edit ' .. vim.fn.fnameescape(wt .. '/notes.txt'))
    local wb = vim.api.nvim_get_current_buf()
    wait(3000, function()
      return client.attached_buffers[wb]
    end)
    check('a file of a linked git worktree is served by the project\'s server (no second server)', client.attached_buffers[wb] and #forge_clients() == 1, {
      attached = client.attached_buffers[wb] or false,
      clients = vim.tbl_map(function(c)
        return c.root_dir
      end, forge_clients()),
    })
  end

  ---------------------------------------------------------------- delete by code action
  vim.cmd('edit other.txt')
  local other = vim.api.nvim_get_current_buf()
  wait(5000, function()
    return #H.forge_diagnostics(other) > 0 and forge.client(other) ~= nil
  end)
  check('findings of a file opened for the first time are shown', #H.forge_diagnostics(other) == 1, diag_summary(H.forge_diagnostics(other)))
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(a)
      return a.title == 'Delete finding'
    end,
  })
  local deleted = wait(5000, function()
    return #H.forge_diagnostics(other) == 0
  end)
  check('the "Delete finding" code action deletes the finding (diagnostics cleared)', deleted, diag_summary(H.forge_diagnostics(other)))
  wait(2000, function()
    return #H.messages_matching('Deleted review finding at other%.txt:1') > 0
  end)
  check('the code action\'s reply is shown (Neovim\'s own handler drops it)', #H.messages_matching('Deleted review finding at other%.txt:1') == 1, H.messages)
  local _, after = run_qf_command('Forge findings', 'Forge findings')
  note('quickfix_after_delete', after)
  check('after the delete :Forge findings lists only the other finding', #after == 1 and after[1].file == 'notes.txt', after)

  ---------------------------------------------------------------- a file name with + @ space é
  -- Neovim spells such a file's URI its own way (`+` and `@` kept, lowercase hex); the
  -- server must still know the file on didOpen and publish its findings again.
  local odd = 'c++ @v2 é.txt'
  local out = vim.fn.system({ 'forge-lsp', 'call', 'review-write', vim.json.encode({ file = odd, line = 1, severity = 'warning', description = 'Odd name finding.' }) })
  check('a finding on a file named with + @ space é is written (forge-lsp call)', vim.v.shell_error == 0, out)
  vim.cmd('edit ' .. vim.fn.fnameescape(odd))
  local ob = vim.api.nvim_get_current_buf()
  note('odd_uri', vim.uri_from_bufnr(ob))
  wait(5000, function()
    return #H.forge_diagnostics(ob) > 0
  end)
  check('findings of a file named with + @ space é are shown', #H.forge_diagnostics(ob) == 1, diag_summary(H.forge_diagnostics(ob)))
  vim.cmd('bdelete ' .. ob)
  vim.cmd('edit ' .. vim.fn.fnameescape(odd))
  ob = vim.api.nvim_get_current_buf()
  wait(5000, function()
    return #H.forge_diagnostics(ob) > 0
  end)
  check('they are shown again after it is closed and reopened (published again on didOpen)', #H.forge_diagnostics(ob) == 1, {
    uri = vim.uri_from_bufnr(ob),
    diagnostics = diag_summary(H.forge_diagnostics(ob)),
  })
end)
