-- A loop's findings in a real Neovim: the auditor of a two-section loop writes a bug on
-- work.txt:1 (a path relative to the loop's worktree) and deletes it in its next audit. The
-- user's work.txt under the project root (diagnostics.mirrorLoopFindings, on by default)
-- and the worktree's work.txt both show it while it is open, as an error naming the loop
-- and section, and both are cleared when the auditor deletes it.
-- Environment: FORGE_TEST_OUT, FORGE_TEST_REPO (cwd), FORGE_TEST_STATE (the agent's state:
-- it holds the turn after the finding while FORGE_TEST_HOLD exists); the agent is
-- tests/agents/scenario.sh with FORGE_TEST_SCENARIO=finding.
local H = dofile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'test', 'helpers.lua'))
local check, wait, note = H.check, H.wait, H.note

local forge = require('forge')
local hold = assert(os.getenv('FORGE_TEST_HOLD'))
local LOOP_WAIT = tonumber(os.getenv('FORGE_TEST_LOOP_WAIT') or '20000')
local NAME = 'nvim-findings'

local function summary(bufnr)
  return vim.tbl_map(function(d)
    return { lnum = d.lnum, severity = d.severity, message = d.message }
  end, H.forge_diagnostics(bufnr))
end

H.run(function()
  local root_buf = H.open_in_project('work.txt')
  if not root_buf then
    return
  end
  -- The agent holds the turn after the finding's audit while the hold file exists.
  local plan = {
    '# Findings test plan',
    '',
    'Loop Name: ' .. NAME,
    '',
    '<!-- forge-section -->',
    '## Phase 1: First',
    '',
    'Append a line to work.txt.',
    '',
    '<!-- forge-section -->',
    '## Phase 2: Second',
    '',
    'Append another line to work.txt.',
  }
  if not H.execute_held(plan, NAME, hold, 'the loop starts') then
    return
  end
  local l = forge.loops()[NAME]
  local wt_file = vim.fs.joinpath(l.worktreeDir, 'work.txt')

  vim.cmd('buffer ' .. root_buf)
  local shown = wait(LOOP_WAIT, function()
    return #H.forge_diagnostics(root_buf) > 0
  end)
  local root_diags = summary(root_buf)
  note('root_diagnostics', root_diags)
  check('the auditor\'s finding shows on the project root\'s work.txt while the loop runs (mirrored)', shown
    and #root_diags == 1
    and root_diags[1].lnum == 0
    and root_diags[1].severity == vim.diagnostic.severity.ERROR
    and root_diags[1].message:find('section 2 is not done', 1, true) ~= nil
    and root_diags[1].message:find('loop ' .. NAME .. ', section 2', 1, true) ~= nil, root_diags)

  vim.cmd('split ' .. vim.fn.fnameescape(wt_file))
  local wt_buf = vim.api.nvim_get_current_buf()
  wait(5000, function()
    return #H.forge_diagnostics(wt_buf) > 0
  end)
  local wt_diags = summary(wt_buf)
  note('worktree_diagnostics', wt_diags)
  check('and on the worktree\'s work.txt, opened while it is open', #wt_diags == 1 and wt_diags[1].lnum == 0, wt_diags)
  check('the worktree\'s file is served by the project\'s one server', forge.client(wt_buf) ~= nil
    and forge.client(wt_buf).id == forge.client(root_buf).id, {
    root = forge.client(root_buf) and forge.client(root_buf).root_dir,
    worktree = forge.client(wt_buf) and forge.client(wt_buf).root_dir,
  })

  local ended, x = H.release_and_wait_end(NAME, hold, LOOP_WAIT)
  check('the loop completes', ended and x.status == 'completed', x)
  wait(5000, function()
    return #H.forge_diagnostics(root_buf) == 0 and #H.forge_diagnostics(wt_buf) == 0
  end)
  check('the deleted finding is cleared from both buffers', #H.forge_diagnostics(root_buf) == 0
    and #H.forge_diagnostics(wt_buf) == 0, { root = summary(root_buf), worktree = summary(wt_buf) })
end)
