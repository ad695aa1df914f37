-- A loop's plan lenses in a real Neovim: the plan buffer is open while the loop runs, its
-- auditor appends a section with plan-adjust, and the section-status lenses follow the loop
-- without the user asking (the server's workspace/textDocumentContent/refresh of the plan;
-- Neovim 0.10 and 0.11 do not take workspace/codeLens/refresh).
-- Environment: FORGE_TEST_OUT, FORGE_TEST_REPO (cwd), FORGE_TEST_HOLD (the agent waits while
-- it exists); the agent is tests/agents/scenario.sh with FORGE_TEST_SCENARIO=adjust.
local H = dofile(vim.fs.joinpath(os.getenv('FORGE_NVIM_PLUGIN'), 'test', 'helpers.lua'))
local check, wait, note = H.check, H.wait, H.note

local forge = require('forge')
local LOOP_WAIT = tonumber(os.getenv('FORGE_TEST_LOOP_WAIT') or '15000')
local hold = assert(os.getenv('FORGE_TEST_HOLD'))

--- The buffer's lenses as { line, character, title }, in the order Neovim shows them.
local function lenses(bufnr)
  local r = {}
  for _, l in ipairs(vim.lsp.codelens.get(bufnr)) do
    r[#r + 1] = {
      line = l.range.start.line,
      character = l.range.start.character,
      title = l.command and l.command.title or '',
    }
  end
  table.sort(r, function(a, b)
    return a.line < b.line or (a.line == b.line and a.character < b.character)
  end)
  return r
end

H.run(function()
  if not H.open_in_project('notes.txt') then
    return
  end
  local plan = {
    '# Lens test plan',
    '',
    '## Objective',
    'Append a line to work.txt.',
    '',
    'Loop Name: nvim-lens',
    '',
    '<!-- forge-section -->',
    '## Phase 1: Work file',
    '',
    '### Files',
    '- work.txt',
    '',
    '### Verification',
    '- cat work.txt',
  }
  local heading = 8 -- 0-based line of '## Phase 1: Work file'
  if not H.execute_held(plan, 'nvim-lens', hold, 'the loop starts (held before its first turn)') then
    return
  end

  vim.cmd('split forge://plan/loop/nvim-lens.md')
  local loopbuf = vim.api.nvim_get_current_buf()
  wait(5000, function()
    return #lenses(loopbuf) > 0
  end)
  local first = lenses(loopbuf)
  note('lenses_while_running', first)
  check('the open loop plan shows its section lens while the loop runs', #first == 1
    and first[1].line == heading
    and first[1].title:find('^Section 1/1 · ') ~= nil, first)

  local ended, l = H.release_and_wait_end('nvim-lens', hold, LOOP_WAIT)
  check('the loop completes, with the section its auditor appended', ended and l.status == 'completed' and l.totalSections == 2, l)

  -- No :e, no manual refresh: the lenses follow the loop on their own.
  local want = {
    { line = heading, character = 0, title = 'Section 1/2 · completed' },
    { line = heading, character = 1, title = 'Section 2/2 · completed · added by plan-adjust: Appended section' },
  }
  wait(5000, function()
    return vim.deep_equal(lenses(loopbuf), want)
  end)
  local last = lenses(loopbuf)
  note('lenses_after_the_loop', last)
  check('after plan-adjust the open loop plan\'s lenses show both sections, the appended one marked, in order', vim.deep_equal(last, want), last)

  -- What Neovim draws: the heading's virtual text, the lenses in their order.
  local function drawn_line()
    local parts = {}
    for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(loopbuf, -1, { heading, 0 }, { heading, -1 }, { details = true })) do
      for _, chunk in ipairs(mark[4].virt_text or {}) do
        parts[#parts + 1] = chunk[1]
      end
    end
    return table.concat(parts)
  end
  local line = drawn_line()
  note('drawn', line)
  local a = line:find('Section 1/2 · completed', 1, true)
  local b = line:find('added by plan-adjust: Appended section', 1, true)
  check('Neovim draws both lenses on the heading, the first section first', a ~= nil and b ~= nil and a < b, line)
  check('the loop plan text (the master) is unchanged', H.buf_text(loopbuf) == table.concat(plan, '\n'), H.buf_text(loopbuf))

  -- Running a lens (a section's loop-status): its reply is shown, and the lenses are drawn
  -- again (Neovim clears the line before running it; its own handler, which the plugin's
  -- command replaces, redrew them).
  H.messages = {}
  vim.api.nvim_win_set_cursor(0, { heading + 1, 0 })
  -- Two lenses on the line: Neovim asks which one (the first is taken here).
  vim.ui.select = function(items, _, on_choice)
    on_choice(items[1], 1)
  end
  local ran = pcall(vim.lsp.codelens.run)
  wait(5000, function()
    return #H.messages_matching('Loop Status') > 0
  end)
  check('running a lens shows its reply (the loop\'s status)', ran and #H.messages_matching('Loop Status') > 0, H.messages)
  wait(5000, function()
    return drawn_line():find('added by plan-adjust', 1, true) ~= nil
  end)
  check('the lenses are drawn again after a lens ran', drawn_line():find('added by plan-adjust', 1, true) ~= nil, drawn_line())
end)
