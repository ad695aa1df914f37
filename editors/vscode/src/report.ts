// What the extension saw, written as JSON for tests (setting `forge.test.reportFile` or the
// environment variable FORGE_VSCODE_REPORT). Nothing is written when neither is set.
//
// The browser test asserts on this file instead of on pixels: every part of the UI that the
// extension drives (status bar, tree views, notifications, opened documents) records here
// what it showed, and the server's traffic that matters (diagnostics, loop statuses, server
// messages) is recorded as received.

import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { userSetting } from './server';

export interface Notice {
  at: number;
  severity: 'info' | 'warning' | 'error';
  text: string;
  actions: string[];
  loop?: string;
  chosen?: string;
}

export interface ServerMessage {
  at: number;
  type: number;
  text: string;
  /** `shown`: passed on to the user; `merged`: a loop end already told by the extension. */
  handling: 'shown' | 'merged' | 'told';
}

export interface ReportData {
  version: 1;
  writtenAt: number;
  activatedAt: number;
  client: {
    state: string;
    serverPath?: string;
    serverVersion?: string;
    sessionId?: string;
    protocolVersion?: number;
    startedAt?: number;
    /** Language clients created and not yet disposed (one after any restart). */
    clients: number;
    /** Language clients created since activation. */
    created: number;
  };
  errors: { at: number; text: string }[];
  diagnostics: Record<string, { finding: boolean; line: number; severity: string; message: string; code?: string; source?: string; data?: unknown }[]>;
  loopStatuses: Record<string, unknown>[];
  statusBar: { text: string; tooltip: string; visible: boolean; command?: string };
  statusBarHistory: string[];
  notifications: Notice[];
  serverMessages: ServerMessage[];
  views: {
    plans: { label: string; description: string; uri: string; contextValue: string }[];
    loops: { label: string; description: string; contextValue: string }[];
    findings: { file: string; items: { label: string; line: number }[] }[];
    /** Distinct findings (the Findings view's badge), and how often the tree was redrawn. */
    findingsCount: number;
    findingsDraws: number;
    visible: { plans: boolean; loops: boolean; findings: boolean };
  };
  editors: { uri: string; languageId: string; lineCount: number; head: string; active: boolean }[];
  commands: { at: number; command: string; ok: boolean; detail: string }[];
  /** The code lenses last given to VS Code for each document (URI → line and title). */
  lenses: Record<string, { line: number; character: number; title: string }[]>;
}

export class Report implements vscode.Disposable {
  readonly data: ReportData;
  private timer: NodeJS.Timeout | undefined;
  private file: string | undefined;

  constructor() {
    const now = Date.now();
    this.data = {
      version: 1,
      writtenAt: now,
      activatedAt: now,
      client: { state: 'activating', clients: 0, created: 0 },
      errors: [],
      diagnostics: {},
      loopStatuses: [],
      statusBar: { text: '', tooltip: '', visible: false },
      statusBarHistory: [],
      notifications: [],
      serverMessages: [],
      views: { plans: [], loops: [], findings: [], findingsCount: 0, findingsDraws: 0, visible: { plans: false, loops: false, findings: false } },
      editors: [],
      commands: [],
      lenses: {},
    };
    this.file = Report.target();
  }

  static target(): string | undefined {
    // User settings only (`userSetting`): a workspace must not pick a file to overwrite.
    const fromSetting = userSetting<string>(vscode.workspace.getConfiguration('forge'), 'test.reportFile') ?? '';
    const file = fromSetting || process.env.FORGE_VSCODE_REPORT || '';
    return file ? path.resolve(file) : undefined;
  }

  get enabled(): boolean {
    return this.file !== undefined;
  }

  configurationChanged(): void {
    this.file = Report.target();
    this.changed();
  }

  error(text: string): void {
    this.data.errors.push({ at: Date.now(), text });
    this.changed();
  }

  command(command: string, ok: boolean, detail: string): void {
    this.data.commands.push({ at: Date.now(), command, ok, detail: detail.slice(0, 500) });
    this.changed();
  }

  /** Schedules a write (coalesced: at most one every 100 ms). */
  changed(): void {
    if (!this.file) {
      // Nobody reads the record: keep only its recent part.
      const d = this.data;
      for (const list of [d.errors, d.loopStatuses, d.statusBarHistory, d.notifications, d.serverMessages, d.commands]) {
        if (list.length > 200) {
          list.splice(0, list.length - 100);
        }
      }
      return;
    }
    if (this.timer) {
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, 100);
  }

  flush(): void {
    if (!this.file) {
      return;
    }
    this.data.writtenAt = Date.now();
    const tmp = `${this.file}.${process.pid}.tmp`;
    try {
      fs.mkdirSync(path.dirname(this.file), { recursive: true });
      fs.writeFileSync(tmp, JSON.stringify(this.data, null, 1));
      fs.renameSync(tmp, this.file);
    } catch {
      // A test report must never break the extension.
    }
  }

  dispose(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.flush();
  }
}
