// The Forge view container's three trees: Plans, Loops, Findings.

import * as path from 'path';
import * as vscode from 'vscode';
import { describeLoop, LoopStatus, Loops, orphaned, TERMINAL } from './loops';
import { Report } from './report';

/** One entry of `forge.plan-read {recent: true}` (`data.plans`). */
export interface PlanEntry {
  uri: string;
  label?: string;
  firstLine?: string;
  sessionId?: string | null;
  loopName?: string | null;
  updatedAt?: number | null;
}

function ago(ms: number | null | undefined): string {
  if (typeof ms !== 'number') {
    return '';
  }
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) {
    return 'just now';
  }
  if (s < 3600) {
    return `${Math.round(s / 60)} min ago`;
  }
  if (s < 86400) {
    return `${Math.round(s / 3600)} h ago`;
  }
  return new Date(ms).toLocaleDateString();
}

// ------------------------------------------------------------------------------- Plans

export class PlansProvider implements vscode.TreeDataProvider<PlanEntry> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  private plans: PlanEntry[] = [];
  private loading: Promise<void> | undefined;
  /** What the tree last showed: it is redrawn only when that changes. */
  private shown = '';

  constructor(
    private readonly fetch: () => Promise<PlanEntry[]>,
    private readonly report: Report,
  ) {}

  /** Reloads the list from the server and redraws the tree. */
  refresh(): Promise<void> {
    if (!this.loading) {
      this.loading = this.fetch()
        .then(
          (plans) => {
            this.plans = plans.filter((p) => p && typeof p.uri === 'string');
          },
          (e) => this.report.error(`plans: ${e instanceof Error ? e.message : String(e)}`),
        )
        .finally(() => {
          this.loading = undefined;
          // The list is reloaded every few seconds while the view is visible; redrawing
          // an unchanged tree closed any context menu open in the Forge views (a user's,
          // and the editor test's "Restart Loop").
          const shown = JSON.stringify(this.plans.map((p) => [p.uri, PlansProvider.title(p), PlansProvider.description(p), p.loopName ?? '']));
          if (shown !== this.shown) {
            this.shown = shown;
            this.emitter.fire();
          }
          this.snapshot();
        });
    }
    return this.loading;
  }

  clear(): void {
    this.plans = [];
    this.shown = '';
    this.emitter.fire();
    this.snapshot();
  }

  entries(): PlanEntry[] {
    return this.plans;
  }

  static title(p: PlanEntry): string {
    const first = (p.firstLine ?? '').replace(/^#+\s*/, '').trim();
    if (first) {
      return first;
    }
    return p.loopName ? `Plan of ${p.loopName}` : 'Session plan';
  }

  static description(p: PlanEntry): string {
    const owner = p.loopName ? `loop ${p.loopName}` : 'session plan';
    const when = ago(p.updatedAt);
    return when ? `${owner} · ${when}` : owner;
  }

  getTreeItem(p: PlanEntry): vscode.TreeItem {
    const item = new vscode.TreeItem(PlansProvider.title(p), vscode.TreeItemCollapsibleState.None);
    item.id = p.uri;
    item.description = PlansProvider.description(p);
    item.tooltip = new vscode.MarkdownString(
      `**${PlansProvider.title(p)}**\n\n${p.label ?? ''}${p.sessionId ? `\n\nSession: \`${p.sessionId}\`` : ''}\n\n\`${p.uri}\``,
    );
    item.iconPath = new vscode.ThemeIcon(p.loopName ? 'sync' : 'note');
    item.contextValue = p.loopName ? 'forgeLoopPlan' : 'forgeSessionPlan';
    item.command = { title: 'Open plan', command: 'forgeLsp.openPlan', arguments: [p.uri] };
    return item;
  }

  getChildren(element?: PlanEntry): PlanEntry[] {
    return element ? [] : this.plans;
  }

  private snapshot(): void {
    this.report.data.views.plans = this.plans.map((p) => ({
      label: PlansProvider.title(p),
      description: PlansProvider.description(p),
      uri: p.uri,
      contextValue: p.loopName ? 'forgeLoopPlan' : 'forgeSessionPlan',
    }));
    this.report.changed();
  }
}

// ------------------------------------------------------------------------------- Loops

export class LoopsProvider implements vscode.TreeDataProvider<LoopStatus> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  /** What the view shows, as last drawn: it is redrawn only when that changes. */
  private drawn = '';

  constructor(
    private readonly loops: Loops,
    private readonly report: Report,
  ) {
    loops.onDidChange(() => {
      // A redraw closes a context menu the user has open on the view: every status
      // notification of a running loop (or a repeat of an ended one's) would close it.
      const shown = JSON.stringify(this.loops.all().map((l) => LoopsProvider.shown(l)));
      if (shown !== this.drawn) {
        this.drawn = shown;
        this.emitter.fire();
      }
      this.snapshot();
    });
  }

  /** Everything an item of the view shows for `l`. */
  static shown(l: LoopStatus): string[] {
    return [l.loopName, describeLoop(l), l.status, LoopsProvider.context(l), ...LoopsProvider.tooltipLines(l)];
  }

  static tooltipLines(l: LoopStatus): string[] {
    return [
      `**${l.loopName}** — ${l.status}`,
      '',
      l.sectionTitle ? `Section: ${l.sectionTitle}` : '',
      typeof l.auditCount === 'number' ? `Audits: ${l.auditCount}` : '',
      l.errorCount ? `Errors: ${l.errorCount}` : '',
      l.terminationReason ? `Reason: ${l.terminationReason}` : '',
      l.branch ? `Branch: \`${l.branch}\`` : '',
      l.worktreeDir ? `Worktree: \`${l.worktreeDir}\`` : '',
    ].filter((x, i) => i < 2 || x);
  }

  static icon(l: LoopStatus): vscode.ThemeIcon {
    if (orphaned(l)) {
      return new vscode.ThemeIcon('warning', new vscode.ThemeColor('list.warningForeground'));
    }
    switch (l.status) {
      case 'running':
        return new vscode.ThemeIcon('sync~spin', new vscode.ThemeColor('charts.blue'));
      case 'completed':
        return new vscode.ThemeIcon('pass', new vscode.ThemeColor('testing.iconPassed'));
      case 'cancelled':
        return new vscode.ThemeIcon('circle-slash');
      default:
        return new vscode.ThemeIcon('warning', new vscode.ThemeColor('list.warningForeground'));
    }
  }

  static context(l: LoopStatus): string {
    return `forgeLoop.${TERMINAL.has(l.status) ? 'ended' : 'running'}.${l.status}`;
  }

  getTreeItem(l: LoopStatus): vscode.TreeItem {
    const item = new vscode.TreeItem(l.loopName, vscode.TreeItemCollapsibleState.None);
    item.id = `loop:${l.loopName}`;
    item.description = describeLoop(l);
    item.iconPath = LoopsProvider.icon(l);
    item.contextValue = LoopsProvider.context(l);
    item.tooltip = new vscode.MarkdownString(LoopsProvider.tooltipLines(l).join('  \n'));
    item.command = { title: 'Open loop status', command: 'forgeLsp.openLoopStatus', arguments: [l.loopName] };
    return item;
  }

  getChildren(element?: LoopStatus): LoopStatus[] {
    return element ? [] : this.loops.all();
  }

  private snapshot(): void {
    this.report.data.views.loops = this.loops.all().map((l) => ({
      label: l.loopName,
      description: describeLoop(l),
      contextValue: LoopsProvider.context(l),
    }));
    this.report.changed();
  }
}

// ------------------------------------------------------------------------------- Findings

export type FindingNode =
  | { kind: 'file'; uri: vscode.Uri; diagnostics: vscode.Diagnostic[] }
  | { kind: 'finding'; uri: vscode.Uri; diagnostic: vscode.Diagnostic };

/** A review finding's diagnostic: the server's (source `forge`) with the finding's id as its
 * code. A plan's structure warnings are the server's too, without a code: they are no
 * findings (not listed, not counted, no Delete; a review found them in the Findings view). */
export function isFinding(d: vscode.Diagnostic): boolean {
  return d.source === 'forge' && findingId(d) !== '';
}

export function findingId(d: vscode.Diagnostic): string {
  const code = d.code;
  if (code === undefined) {
    return '';
  }
  return String(typeof code === 'object' ? code.value : code);
}

/**
 * What identifies a finding: `data.findingId` (docs/protocol.md, "Notifications and
 * documents"), else its code. A loop finding is published on the loop's worktree and, with
 * `diagnostics.mirrorLoopFindings` (the default), again under the project root: two
 * diagnostics, one finding.
 */
export function findingKey(d: vscode.Diagnostic): string {
  const id = (d as { data?: { findingId?: unknown } }).data?.findingId;
  return typeof id === 'number' || typeof id === 'string' ? String(id) : findingId(d);
}

/** The findings' diagnostics (source `forge`) published by the server, grouped by file. */
export class FindingsProvider implements vscode.TreeDataProvider<FindingNode> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  private files: { uri: vscode.Uri; diagnostics: vscode.Diagnostic[] }[] = [];
  /** What the tree last showed: it is redrawn only when that changes. */
  private shown: string | undefined;

  constructor(private readonly report: Report) {
    this.reload();
  }

  /**
   * Reads the findings again; redraws the tree only when they changed (any extension's
   * diagnostics change calls this, and a redraw closes a context menu open on the view).
   * A finding published at two places (a loop finding and its mirror under the project
   * root) is listed once: at its place inside the workspace when it has one.
   */
  reload(): void {
    const all: { uri: vscode.Uri; d: vscode.Diagnostic; inside: boolean }[] = [];
    for (const [uri, diagnostics] of vscode.languages.getDiagnostics()) {
      const inside = vscode.workspace.getWorkspaceFolder(uri) !== undefined;
      for (const d of diagnostics) {
        if (isFinding(d)) {
          all.push({ uri, d, inside });
        }
      }
    }
    const chosen = new Map<string, { uri: vscode.Uri; d: vscode.Diagnostic; inside: boolean }>();
    for (const f of all) {
      const key = findingKey(f.d);
      const had = chosen.get(key);
      if (!had || (f.inside && !had.inside)) {
        chosen.set(key, f);
      }
    }
    const byUri = new Map<string, { uri: vscode.Uri; diagnostics: vscode.Diagnostic[] }>();
    for (const f of chosen.values()) {
      const k = f.uri.toString();
      const entry = byUri.get(k) ?? { uri: f.uri, diagnostics: [] };
      entry.diagnostics.push(f.d);
      byUri.set(k, entry);
    }
    const files = [...byUri.values()];
    for (const f of files) {
      f.diagnostics.sort((a, b) => a.range.start.line - b.range.start.line);
    }
    files.sort((a, b) => vscode.workspace.asRelativePath(a.uri).localeCompare(vscode.workspace.asRelativePath(b.uri)));
    this.files = files;
    const shown = JSON.stringify(
      files.map((f) => [
        f.uri.toString(),
        f.diagnostics.map((d) => [findingKey(d), d.range.start.line, d.severity, d.message]),
      ]),
    );
    if (shown === this.shown) {
      return;
    }
    this.shown = shown;
    this.emitter.fire();
    this.report.data.views.findings = files.map((f) => ({
      file: vscode.workspace.asRelativePath(f.uri),
      items: f.diagnostics.map((d) => ({ label: FindingsProvider.label(d), line: d.range.start.line + 1 })),
    }));
    this.report.data.views.findingsCount = this.count();
    this.report.data.views.findingsDraws += 1;
    this.report.changed();
  }

  /** The number of distinct findings (the view's badge). */
  count(): number {
    return this.files.reduce((n, f) => n + f.diagnostics.length, 0);
  }

  static label(d: vscode.Diagnostic): string {
    return d.message.split('\n')[0];
  }

  getTreeItem(node: FindingNode): vscode.TreeItem {
    if (node.kind === 'file') {
      const item = new vscode.TreeItem(node.uri, vscode.TreeItemCollapsibleState.Expanded);
      item.id = `file:${node.uri.toString()}`;
      // The file's problem count is drawn by VS Code (the resource decoration).
      item.description = path.dirname(vscode.workspace.asRelativePath(node.uri)).replace(/^\.$/, '');
      item.contextValue = 'forgeFindingFile';
      return item;
    }
    const d = node.diagnostic;
    const item = new vscode.TreeItem(FindingsProvider.label(d), vscode.TreeItemCollapsibleState.None);
    item.id = `finding:${node.uri.toString()}#${findingId(d)}:${d.range.start.line}`;
    item.description = `line ${d.range.start.line + 1}${findingId(d) ? ` · #${findingId(d)}` : ''}`;
    item.tooltip = new vscode.MarkdownString(undefined).appendText(d.message);
    item.iconPath = new vscode.ThemeIcon(
      d.severity === vscode.DiagnosticSeverity.Error ? 'error' : 'warning',
      new vscode.ThemeColor(d.severity === vscode.DiagnosticSeverity.Error ? 'errorForeground' : 'list.warningForeground'),
    );
    item.contextValue = 'forgeFinding';
    item.command = { title: 'Reveal finding', command: 'forgeLsp.revealFinding', arguments: [node.uri, d.range] };
    return item;
  }

  getChildren(node?: FindingNode): FindingNode[] {
    if (!node) {
      return this.files.map((f) => ({ kind: 'file', uri: f.uri, diagnostics: f.diagnostics }));
    }
    if (node.kind === 'file') {
      return node.diagnostics.map((d) => ({ kind: 'finding', uri: node.uri, diagnostic: d }));
    }
    return [];
  }
}
