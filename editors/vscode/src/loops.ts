// Loop state from `forge/loopStatus`, the status bar item, and the loop-end notification.
//
// Loop ends are told once per end, by the extension, with an "Open Status" button:
// Information when the loop completed, Warning with the reason otherwise. The server also
// sends `window/showMessage` for a loop end ("Forge: loop NAME completed.", PROTOCOL.md §7
// and §10.2); the extension takes over the language client's showMessage handler and drops
// those (recording them as `merged`) when it has told that end already. When the server's
// message arrives first (or alone), the extension tells the end from it, with the button, and
// the status notification that follows is not told again.

import * as vscode from 'vscode';
import { Report } from './report';

export interface LoopStatus {
  loopName: string;
  status: string;
  phase?: string | null;
  iteration?: number | null;
  maxIterations?: number | null;
  sectionIndex?: number | null;
  totalSections?: number | null;
  sectionTitle?: string | null;
  auditCount?: number | null;
  errorCount?: number | null;
  terminationReason?: string | null;
  worktreeDir?: string | null;
  branch?: string | null;
  sessionId?: string | null;
  startedAt?: number | null;
  completedAt?: number | null;
  lastTransition?: unknown;
  /** A running loop whose server has ended: the process id it had (nothing runs it). */
  serverGone?: number | null;
}

/** A loop that is recorded as running but that nothing runs (its server ended). */
export function orphaned(l: LoopStatus): boolean {
  return l.status === 'running' && typeof l.serverGone === 'number';
}

export const TERMINAL = new Set(['completed', 'cancelled', 'errored', 'stalled']);

/** `section 2/4 · auditing · iteration 3` (sections only when the plan has them). */
export function describeLoop(l: LoopStatus): string {
  const parts: string[] = [];
  if (orphaned(l)) {
    return `not running: its server (process ${l.serverGone}) has ended · restart or cancel it`;
  }
  if (!TERMINAL.has(l.status)) {
    if (typeof l.sectionIndex === 'number' && l.totalSections) {
      parts.push(`section ${l.sectionIndex + 1}/${l.totalSections}`);
    }
    if (l.phase) {
      parts.push(l.phase.replace('_', ' '));
    }
    if (typeof l.iteration === 'number') {
      parts.push(`iteration ${l.iteration}`);
    }
    return [l.status, ...parts].join(' · ');
  }
  const reason = l.terminationReason && l.terminationReason !== l.status ? `: ${l.terminationReason}` : '';
  const sections = l.totalSections ? ` · ${l.totalSections} section${l.totalSections === 1 ? '' : 's'}` : '';
  return `${l.status}${reason}${sections}`;
}

export function statusUri(name: string): vscode.Uri {
  return vscode.Uri.parse(`forge://loop/${encodeURIComponent(name)}/status.md`);
}

const END_MESSAGE = /^Forge: loop (\S+) (completed|was cancelled|cancelled|errored|stalled)\b/;

export class Loops implements vscode.Disposable {
  private readonly loops = new Map<string, LoopStatus & { receivedAt: number }>();
  /** Loop name -> the completedAt (or receipt time) of the end already told. */
  private readonly told = new Map<string, number>();
  private readonly item: vscode.StatusBarItem;
  private readonly changeEmitter = new vscode.EventEmitter<void>();
  readonly onDidChange = this.changeEmitter.event;
  private fadeTimer: NodeJS.Timeout | undefined;
  /** How long an ended loop stays in the status bar. */
  static readonly SHOW_ENDED_MS = 30_000;

  constructor(private readonly report: Report) {
    this.item = vscode.window.createStatusBarItem('forgeLsp.loopStatus', vscode.StatusBarAlignment.Left, 50);
    this.item.name = 'Forge Loops';
    this.item.command = { title: 'Show Forge loops', command: 'forgeLsp.loops.focus' };
    this.render();
  }

  all(): (LoopStatus & { receivedAt: number })[] {
    return [...this.loops.values()].sort((a, b) => {
      const ra = TERMINAL.has(a.status) ? 1 : 0;
      const rb = TERMINAL.has(b.status) ? 1 : 0;
      return ra - rb || (b.startedAt ?? 0) - (a.startedAt ?? 0) || a.loopName.localeCompare(b.loopName);
    });
  }

  get(name: string): LoopStatus | undefined {
    return this.loops.get(name);
  }

  /** A `forge/loopStatus` notification (live, or the replay after `initialized`). */
  onStatus(s: LoopStatus): void {
    if (!s || typeof s.loopName !== 'string') {
      return;
    }
    this.report.data.loopStatuses.push({ ...s, receivedAt: Date.now() });
    const prev = this.loops.get(s.loopName);
    this.loops.set(s.loopName, { ...s, receivedAt: Date.now() });
    if (!TERMINAL.has(s.status)) {
      this.told.delete(s.loopName);
    } else if (prev ? !TERMINAL.has(prev.status) : this.recentEnd(s)) {
      this.tellEnd(s);
    }
    this.render();
    this.changeEmitter.fire();
    this.report.changed();
  }

  /** Statuses from `forge.loop-status` (a list): fills in what notifications did not bring. */
  merge(list: LoopStatus[]): void {
    let changed = false;
    for (const s of list) {
      if (!s || typeof s.loopName !== 'string') {
        continue;
      }
      const prev = this.loops.get(s.loopName);
      // `serverGone` of the same run of the loop (a restart gives a new `startedAt`): the
      // list is how a window already open learns that the loop's server ended (a review).
      const gone = (x?: LoopStatus) => (typeof x?.serverGone === 'number' ? x.serverGone : null);
      const sameRun = !prev || prev.startedAt === undefined || prev.startedAt === s.startedAt;
      if (
        !prev ||
        prev.status !== s.status ||
        prev.phase !== s.phase ||
        prev.iteration !== s.iteration ||
        (sameRun && gone(prev) !== gone(s))
      ) {
        this.loops.set(s.loopName, { ...prev, ...s, serverGone: gone(s), receivedAt: Date.now() });
        changed = true;
      }
    }
    if (changed) {
      this.render();
      this.changeEmitter.fire();
      this.report.changed();
    }
  }

  /** Forget everything (the server restarted: its replay brings the state back). */
  clear(): void {
    this.loops.clear();
    this.render();
    this.changeEmitter.fire();
  }

  private recentEnd(s: LoopStatus): boolean {
    return typeof s.completedAt === 'number' && Date.now() - s.completedAt < 60_000;
  }

  private endKey(s: LoopStatus): number {
    return typeof s.completedAt === 'number' ? s.completedAt : 0;
  }

  private tellEnd(s: LoopStatus, serverText?: string): void {
    const key = this.endKey(s);
    if (this.told.has(s.loopName)) {
      return;
    }
    this.told.set(s.loopName, key);
    const ok = s.status === 'completed';
    const reason = s.terminationReason && s.terminationReason !== s.status ? s.terminationReason : undefined;
    const text =
      serverText ??
      (ok ? `Forge: loop ${s.loopName} completed.` : `Forge: loop ${s.loopName} ${s.status}${reason ? `: ${reason}` : ''}.`);
    const action = 'Open Status';
    const notice = { at: Date.now(), severity: ok ? 'info' : 'warning', text, actions: [action], loop: s.loopName } as const;
    const recorded: (typeof this.report.data.notifications)[number] = { ...notice, actions: [...notice.actions] };
    this.report.data.notifications.push(recorded);
    this.report.changed();
    const shown = ok ? vscode.window.showInformationMessage(text, action) : vscode.window.showWarningMessage(text, action);
    void shown.then((choice) => {
      if (choice === action) {
        recorded.chosen = choice;
        this.report.changed();
        void vscode.commands.executeCommand('forgeLsp.openLoopStatus', s.loopName);
      }
    });
  }

  /**
   * A `window/showMessage` from the server. Returns true when it was a loop end, handled
   * here (told, or dropped as told already); false when the caller should show it.
   */
  onServerMessage(type: number, text: string): boolean {
    const m = END_MESSAGE.exec(text);
    if (!m) {
      this.report.data.serverMessages.push({ at: Date.now(), type, text, handling: 'shown' });
      this.report.changed();
      return false;
    }
    const name = m[1];
    if (this.told.has(name)) {
      this.report.data.serverMessages.push({ at: Date.now(), type, text, handling: 'merged' });
      this.report.changed();
      return true;
    }
    const word = m[2] === 'was cancelled' ? 'cancelled' : m[2];
    const known = this.loops.get(name);
    const s: LoopStatus = known && TERMINAL.has(known.status) ? known : { loopName: name, status: word };
    this.report.data.serverMessages.push({ at: Date.now(), type, text, handling: 'told' });
    this.tellEnd(s, text);
    return true;
  }

  private render(): void {
    // A loop whose server ended is no running one (a review found it spinning for good).
    const running = this.all().filter((l) => !TERMINAL.has(l.status) && !orphaned(l));
    const stopped = this.all().filter(orphaned);
    const now = Date.now();
    let text = '';
    let tooltip = '';
    if (running.length === 0 && stopped.length > 0) {
      const l = stopped[0];
      text = `$(warning) Forge: ${l.loopName} · server stopped`;
      tooltip = stopped.map((r) => `${r.loopName}: ${describeLoop(r)}`).join('\n') + '\nClick to show the Loops view.';
    } else if (running.length > 0) {
      const l = running[0];
      const section =
        typeof l.sectionIndex === 'number' && l.totalSections ? ` ${l.sectionIndex + 1}/${l.totalSections}` : '';
      const phase = l.phase ? ` · ${l.phase.replace('_', ' ')}` : '';
      const more = running.length > 1 ? ` (+${running.length - 1})` : '';
      const halted = stopped.length > 0 ? ` (+${stopped.length} stopped)` : '';
      text = `$(sync~spin) Forge: ${l.loopName}${section}${phase}${more}${halted}`;
      tooltip =
        [...running, ...stopped].map((r) => `${r.loopName}: ${describeLoop(r)}`).join('\n') + '\nClick to show the Loops view.';
    } else {
      const ended = this.all()
        .filter((l) => TERMINAL.has(l.status) && now - l.receivedAt < Loops.SHOW_ENDED_MS && this.told.has(l.loopName))
        .sort((a, b) => b.receivedAt - a.receivedAt)[0];
      if (ended) {
        const icon = ended.status === 'completed' ? '$(check)' : '$(warning)';
        text = `${icon} Forge: ${ended.loopName} ${ended.status}`;
        tooltip = `${ended.loopName}: ${describeLoop(ended)}\nClick to show the Loops view.`;
        if (this.fadeTimer) {
          clearTimeout(this.fadeTimer);
        }
        this.fadeTimer = setTimeout(() => this.render(), Loops.SHOW_ENDED_MS - (now - ended.receivedAt) + 50);
      }
    }
    this.item.text = text;
    this.item.tooltip = tooltip;
    if (text) {
      this.item.show();
    } else {
      this.item.hide();
    }
    const r = this.report.data;
    r.statusBar = { text, tooltip, visible: text !== '', command: 'forgeLsp.loops.focus' };
    if (text && r.statusBarHistory[r.statusBarHistory.length - 1] !== text) {
      r.statusBarHistory.push(text);
    }
    this.report.changed();
  }

  dispose(): void {
    if (this.fadeTimer) {
      clearTimeout(this.fadeTimer);
    }
    this.item.dispose();
    this.changeEmitter.dispose();
  }
}
