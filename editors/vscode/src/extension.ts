// Forge for VS Code: starts forge-lsp for the workspace and adds what the language client
// does not: the Forge views (Plans, Loops, Findings), the loop status bar item, the loop-end
// notification and the palette commands.
//
// The server's own commands (`forge.plan-read`, `forge.execute-plan`, ...) are registered by
// the language client from `executeCommandProvider.commands`: this file never registers a
// `forge.*` command id itself; its commands are `forgeLsp.*`.

import * as fs from 'fs';
import * as vscode from 'vscode';
import {
  CloseAction,
  ErrorAction,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ResponseError,
  RevealOutputChannelOn,
  ServerOptions,
  State,
} from 'vscode-languageclient/node';
import { describeLoop, LoopStatus, Loops, statusUri, TERMINAL } from './loops';
import { Report } from './report';
import { checkBinary, expandPath, INSTALL_HINT, readSettings, resolveServer } from './server';
import { FindingNode, FindingsProvider, isFinding, LoopsProvider, PlanEntry, PlansProvider } from './views';

interface ToolResult {
  text?: string;
  data?: Record<string, unknown>;
}

const STATE_NAMES: Record<number, string> = {
  [State.Starting]: 'starting',
  [State.Running]: 'running',
  [State.Stopped]: 'stopped',
  [State.StartFailed]: 'start-failed',
};

/** The server's text of a live configuration change it rejected (did_change_configuration.rs). */
const CONFIG_REJECTED = /;\s*the previous configuration stays in effect\.?$/;

/**
 * The language client, except that a failed start is told by the extension alone: the
 * client's own "couldn't create connection to server" is forced on the user as a second
 * pop-up after the extension's (which says what to do), so it only goes to the log; so does
 * its "Restarting server failed" once the extension has told the failure.
 */
class ForgeClient extends LanguageClient {
  constructor(
    serverOptions: ServerOptions,
    clientOptions: LanguageClientOptions,
    private readonly told: () => boolean,
  ) {
    super('forge', 'Forge', serverOptions, clientOptions);
  }

  override error(message: string, data?: unknown, showNotification: boolean | 'force' = true): void {
    if (
      showNotification &&
      (/couldn't create connection to server/.test(message) || (/^Restarting server failed/.test(message) && this.told()))
    ) {
      showNotification = false;
    }
    super.error(message, data, showNotification);
  }
}

/** The setting to open for an `initialize` error: the one it names, else the server's. */
function settingAtFault(message: string): string {
  if (/initializationOptions\.forge\.config|\bforge\.config\b/.test(message)) {
    return 'forge.config';
  }
  if (/initializationOptions\.forge\.dataDir|\bdataDir\b|data director/i.test(message)) {
    return 'forge.dataDir';
  }
  return 'forge.server';
}

class Forge implements vscode.Disposable {
  readonly output = vscode.window.createOutputChannel('Forge', { log: true });
  readonly report = new Report();
  readonly loops = new Loops(this.report);
  readonly plans: PlansProvider;
  readonly loopTree: LoopsProvider;
  readonly findings: FindingsProvider;
  private client: LanguageClient | undefined;
  private starting: Promise<void> | undefined;
  private restarting: Promise<void> | undefined;
  private restartQueued: Promise<void> | undefined;
  /** What each language client's listeners hold: disposed with their client. */
  private readonly clientSubscriptions = new Map<LanguageClient, vscode.Disposable[]>();
  /** Told of the server's rejection of a live forge.config change (window/showMessage). */
  private configVerdict: ((rejected: string | undefined, superseded?: boolean) => void) | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  private plansView: vscode.TreeView<PlanEntry>;
  private pollTimer: NodeJS.Timeout | undefined;
  private crashes: number[] = [];

  constructor(private readonly context: vscode.ExtensionContext) {
    this.plans = new PlansProvider(() => this.fetchPlans(), this.report);
    this.loopTree = new LoopsProvider(this.loops, this.report);
    this.findings = new FindingsProvider(this.report);
    this.plansView = vscode.window.createTreeView('forgeLsp.plans', { treeDataProvider: this.plans });
    const loopsView = vscode.window.createTreeView('forgeLsp.loops', { treeDataProvider: this.loopTree });
    const findingsView = vscode.window.createTreeView('forgeLsp.findings', {
      treeDataProvider: this.findings,
      showCollapseAll: true,
    });
    const visibility = () => {
      this.report.data.views.visible = {
        plans: this.plansView.visible,
        loops: loopsView.visible,
        findings: findingsView.visible,
      };
      this.report.changed();
    };
    visibility();
    let badged = 0;
    const badge = () => {
      const n = this.findings.count();
      if (n !== badged) {
        badged = n;
        findingsView.badge = n > 0 ? { value: n, tooltip: `${n} review finding${n === 1 ? '' : 's'}` } : undefined;
      }
    };
    this.disposables.push(
      this.output,
      this.report,
      this.loops,
      this.plansView,
      loopsView,
      findingsView,
      vscode.languages.onDidChangeDiagnostics((e) => {
        this.findings.reload();
        badge();
        this.recordDiagnostics(e.uris);
      }),
      this.plansView.onDidChangeVisibility(() => {
        this.pollPlans();
        visibility();
      }),
      loopsView.onDidChangeVisibility(visibility),
      findingsView.onDidChangeVisibility(visibility),
      this.loops.onDidChange(() => {
        // A loop that starts or ends changes the list of plans (loop plans).
        if (this.plansView.visible) {
          void this.plans.refresh();
        }
      }),
      vscode.window.onDidChangeVisibleTextEditors(() => this.recordEditors()),
      vscode.window.onDidChangeActiveTextEditor(() => this.recordEditors()),
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (e.document.uri.scheme === 'forge') {
          this.recordEditors();
        }
      }),
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfiguration(e)),
      vscode.workspace.onDidChangeWorkspaceFolders(() => {
        if (!this.client && !this.restarting) {
          void this.start();
        }
      }),
    );
    this.registerCommands();
    this.recordEditors();
  }

  // ----------------------------------------------------------------------------- client

  /** Starts the language server (unless running); errors are shown, never thrown. */
  start(): Promise<void> {
    if (!this.starting) {
      this.starting = this.doStart().finally(() => {
        this.starting = undefined;
      });
    }
    return this.starting;
  }

  private setState(state: string): void {
    this.report.data.client.state = state;
    this.report.changed();
  }

  private async doStart(): Promise<void> {
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!folder) {
      this.setState('no-folder');
      this.output.appendLine('No folder is open: forge-lsp starts when a folder is opened.');
      return;
    }
    const settings = readSettings();
    const resolved = resolveServer(settings, this.context.extensionPath);
    if (!resolved.path) {
      this.fail(`Forge: cannot start the language server: ${resolved.how}. ${INSTALL_HINT}`);
      return;
    }
    this.output.appendLine(`Using ${resolved.how}.`);
    let version: string;
    try {
      version = await checkBinary(resolved.path);
    } catch (e) {
      this.fail(
        `Forge: ${resolved.path} cannot be used as the language server: ${(e as Error).message}. ${INSTALL_HINT}`,
      );
      return;
    }
    this.output.appendLine(`${version} for ${folder.uri.fsPath}`);
    this.report.data.client.serverPath = resolved.path;
    this.report.data.client.serverVersion = version;

    const serverOptions: ServerOptions = {
      command: resolved.path,
      // No `transport`: with TransportKind.stdio the client would append its own --stdio.
      args: [...settings.args, 'serve', '--stdio'],
      options: { cwd: folder.uri.fsPath, env: { ...process.env } },
    };
    const forgeInit: Record<string, unknown> = { agent: 'user' };
    if (settings.dataDir) {
      forgeInit.dataDir = expandPath(settings.dataDir);
    }
    if (settings.config && Object.keys(settings.config).length > 0) {
      forgeInit.config = settings.config;
    }
    // Set when the extension told the user why this start failed (one message, not two).
    let told = false;
    const clientOptions: LanguageClientOptions = {
      // Findings land on any file of the project; plans are forge:// documents.
      documentSelector: [{ scheme: 'file' }, { scheme: 'forge' }],
      workspaceFolder: folder,
      initializationOptions: { forge: forgeInit },
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationFailedHandler: (error) => {
        const raw = error instanceof ResponseError || error instanceof Error ? error.message : String(error);
        const setting = settingAtFault(raw);
        const msg = raw
          .replace(/initializationOptions\.forge\.config/g, 'the setting forge.config')
          .replace(/initializationOptions\.forge\.dataDir/g, 'the setting forge.dataDir')
          .replace(/[.\s]+$/, '');
        const fix =
          setting === 'forge.server'
            ? 'Fix what it names, then run "Forge: Restart Server".'
            : `Fix the setting ${setting} ("Open Settings"): the extension offers to restart forge-lsp when it changes (or run "Forge: Restart Server").`;
        told = true;
        this.fail(`Forge: forge-lsp refused to start for ${folder.name}: ${msg}. ${fix}`, setting);
        return false;
      },
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue, handled: true }),
        closed: () => {
          if (this.report.data.client.state === 'failed') {
            return { action: CloseAction.DoNotRestart, handled: true };
          }
          const now = Date.now();
          this.crashes = [...this.crashes.filter((t) => now - t < 180_000), now];
          this.loops.clear();
          if (this.crashes.length > 3) {
            const message = `Forge: forge-lsp exited ${this.crashes.length} times in 3 minutes and was not restarted. See "Forge: Show Server Log"; check the settings forge.server.path and forge.server.args, then run "Forge: Restart Server".`;
            this.report.error(message);
            this.setState('crashed');
            void this.offerHelp(message, 'forge.server');
            return { action: CloseAction.DoNotRestart, handled: true };
          }
          this.report.error('forge-lsp exited; restarting it');
          this.output.appendLine('forge-lsp exited; restarting it.');
          return { action: CloseAction.Restart, handled: true };
        },
      },
      middleware: {
        // The server takes exactly one input object (PROTOCOL.md §3); VS Code runs a
        // server command invoked without arguments (a key binding, another extension) with
        // `[]`, which means an empty input here.
        // Recorded like the extension's own commands (the test report).
        executeCommand: async (command, args, next) => {
          try {
            const result: unknown = await next(command, args.length === 0 ? [{}] : args);
            const text = (result as { text?: unknown } | null | undefined)?.text;
            this.report.command(command, true, typeof text === 'string' ? text : '');
            return result;
          } catch (e) {
            this.report.command(command, false, e instanceof Error ? e.message : String(e));
            throw e;
          }
        },
        // The server's code lenses run its commands, whose results the client drops: route
        // them through the extension so that the user sees what happened.
        provideCodeLenses: async (document, token, next) => {
          const lenses = await next(document, token);
          for (const lens of lenses ?? []) {
            const cmd = lens.command;
            if (cmd?.command === 'forge.execute-plan') {
              lens.command = { ...cmd, command: 'forgeLsp.executePlan', arguments: [cmd.arguments?.[0] ?? {}] };
            } else if (cmd?.command === 'forge.loop-status') {
              const name = (cmd.arguments?.[0] as { name?: string } | undefined)?.name;
              if (name) {
                lens.command = { ...cmd, command: 'forgeLsp.openLoopStatus', arguments: [name] };
              }
            }
          }
          if (this.report.enabled) {
            this.report.data.lenses[document.uri.toString()] = (lenses ?? []).map((l) => ({
              line: l.range.start.line,
              character: l.range.start.character,
              title: l.command?.title ?? '',
            }));
            this.report.changed();
          }
          return lenses;
        },
      },
    };

    const client = new ForgeClient(serverOptions, clientOptions, () => this.report.data.client.state === 'failed');
    const subscriptions: vscode.Disposable[] = [];
    this.clientSubscriptions.set(client, subscriptions);
    this.report.data.client.clients += 1;
    this.report.data.client.created += 1;
    subscriptions.push(client.onNotification('forge/loopStatus', (params: LoopStatus) => this.loops.onStatus(params)));
    // Replaces the client's own showMessage handler (see loops.ts: loop ends are told once).
    subscriptions.push(client.onNotification('window/showMessage', (params: { type: number; message: string }) => {
      if (params.type === 1 && CONFIG_REJECTED.test(params.message) && this.configVerdict) {
        // Told by onConfiguration, with what to do instead of a restart.
        this.report.data.serverMessages.push({ at: Date.now(), type: params.type, text: params.message, handling: 'told' });
        this.report.changed();
        this.configVerdict(params.message);
        return;
      }
      if (!this.loops.onServerMessage(params.type, params.message)) {
        const show =
          params.type === 1
            ? vscode.window.showErrorMessage
            : params.type === 2
              ? vscode.window.showWarningMessage
              : vscode.window.showInformationMessage;
        void show(params.message);
      }
    }));
    subscriptions.push(
      client.onDidChangeState((e) => {
        if (this.client !== client) {
          return; // a client being disposed (a restart): its end is no news
        }
        if (e.newState === State.StartFailed && this.report.data.client.state === 'failed') {
          return; // told already (initializationFailedHandler)
        }
        this.setState(STATE_NAMES[e.newState] ?? String(e.newState));
        if (e.newState === State.Running) {
          this.onRunning(client);
        }
      }),
    );
    this.client = client;
    this.setState('starting');
    try {
      await client.start();
    } catch (e) {
      if (!told) {
        this.fail(`Forge: forge-lsp failed to start: ${(e as Error).message}. See "Forge: Show Server Log". ${INSTALL_HINT}`);
      }
      if (this.client === client) {
        this.client = undefined;
      }
      await this.disposeClient(client, 2000, false);
    }
  }

  /**
   * Stops and disposes `client` and what listens to it. With `settle`, a start of it under
   * way (the client's own restart after a crash) is let finish first: disposing a starting
   * client fails, and the client then still reaches Running, unseen.
   */
  private async disposeClient(client: LanguageClient, timeout: number, settle: boolean): Promise<void> {
    if (settle && client.state === State.Starting) {
      await client.start().catch(() => undefined); // the start under way, not a new one
    }
    for (const d of this.clientSubscriptions.get(client) ?? []) {
      d.dispose();
    }
    if (this.clientSubscriptions.delete(client)) {
      this.report.data.client.clients -= 1;
      this.report.changed();
    }
    try {
      await client.dispose(timeout);
    } catch (e) {
      // A client that never ran (its start failed) cannot be stopped: the Node client ends
      // its process all the same.
      this.output.appendLine(`Stopping forge-lsp: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  private onRunning(client: LanguageClient): void {
    const forge = (client.initializeResult?.capabilities.experimental as { forge?: Record<string, unknown> } | undefined)
      ?.forge;
    this.report.data.client.sessionId = typeof forge?.sessionId === 'string' ? forge.sessionId : undefined;
    this.report.data.client.protocolVersion =
      typeof forge?.protocolVersion === 'number' ? forge.protocolVersion : undefined;
    this.report.data.client.startedAt = Date.now();
    this.output.appendLine(`Connected; session ${this.report.data.client.sessionId ?? '(unknown)'}.`);
    void this.refreshAll();
  }

  private fail(message: string, setting = 'forge.server'): void {
    this.output.appendLine(message);
    this.report.error(message);
    this.setState('failed');
    void this.offerHelp(message, setting);
  }

  /** Shows a notification and records it in the report (with the button chosen). */
  private async notify(severity: 'info' | 'warning' | 'error', text: string, actions: string[]): Promise<string | undefined> {
    const recorded = { at: Date.now(), severity, text, actions: [...actions] } as (typeof this.report.data.notifications)[number];
    this.report.data.notifications.push(recorded);
    this.report.changed();
    const show =
      severity === 'error'
        ? vscode.window.showErrorMessage
        : severity === 'warning'
          ? vscode.window.showWarningMessage
          : vscode.window.showInformationMessage;
    const choice = await show(text, ...actions);
    if (choice) {
      recorded.chosen = choice;
      this.report.changed();
    }
    return choice;
  }

  private async offerHelp(message: string, setting: string): Promise<void> {
    const choice = await this.notify('error', message, ['Open Settings', 'Show Server Log']);
    if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', setting);
    } else if (choice === 'Show Server Log') {
      this.output.show(true);
    }
  }

  /**
   * Stops forge-lsp and starts it again. Asked while a restart is under way, it restarts
   * once more after that one (its start may have read the previous settings); further
   * asks meanwhile share that second restart.
   */
  restart(): Promise<void> {
    if (this.restartQueued) {
      return this.restartQueued;
    }
    const previous = this.restarting;
    const run = async () => {
      if (previous) {
        await previous;
        this.restartQueued = undefined;
      }
      await this.doRestart();
    };
    const p: Promise<void> = run().finally(() => {
      if (this.restarting === p) {
        this.restarting = undefined;
      }
    });
    if (previous) {
      this.restartQueued = p;
    }
    this.restarting = p;
    return p;
  }

  private async doRestart(): Promise<void> {
    // A start under way ends first (running or failed): disposing a starting client fails,
    // and the client would then run on unseen while a second one starts.
    if (this.starting) {
      await this.starting;
    }
    const client = this.client;
    this.client = undefined;
    this.crashes = [];
    this.loops.clear();
    this.plans.clear();
    if (client) {
      await this.disposeClient(client, 5000, true);
    }
    await this.start();
  }

  private onConfiguration(e: vscode.ConfigurationChangeEvent): void {
    if (e.affectsConfiguration('forge.test.reportFile')) {
      this.report.configurationChanged();
    }
    const config = e.affectsConfiguration('forge.config');
    const server = e.affectsConfiguration('forge.server') || e.affectsConfiguration('forge.dataDir');
    if (config || server) {
      void this.offerRestart(config, server);
    }
  }

  /**
   * A change of forge.config, forge.server.* or forge.dataDir. A running server gets the new
   * forge.config at once; a restart is offered whether or not the server runs (a server that
   * refused to start with the old settings is started with the new ones), except after the
   * server rejected the new forge.config: it keeps the previous one, and would refuse to
   * start with the new one.
   */
  private async offerRestart(config: boolean, server: boolean): Promise<void> {
    const client = this.client;
    const running = !!client?.isRunning();
    if (config && running && client) {
      const verdict = await this.sendConfiguration(client);
      if (verdict === 'superseded') {
        return; // a later change is being sent: its answer decides
      }
      if (verdict !== undefined) {
        const why = verdict
          .replace(/^forge-lsp:\s*/, '')
          .replace(CONFIG_REJECTED, '')
          .replace(/workspace\/didChangeConfiguration \(section forge\)/g, 'forge.config');
        const choice = await this.notify(
          'error',
          `Forge: forge.config was not applied: ${why}. forge-lsp keeps its previous configuration; a restart now would fail (forge-lsp refuses to start with this forge.config), so fix the setting first.`,
          ['Open Settings'],
        );
        if (choice === 'Open Settings') {
          await vscode.commands.executeCommand('workbench.action.openSettings', 'forge.config');
        }
        return;
      }
    }
    let text: string;
    if (running && !server) {
      // Most keys apply at once; the server takes trust, the agent program, the sandbox and
      // plugin variables only from the initialization options (an editor's later settings
      // may come from a project's files), so those need a restart.
      text =
        'Forge: forge.config changed. Trust, agent, sandbox and plugin settings take effect when forge-lsp restarts. Restart it now?';
    } else {
      const what = server ? 'the server settings changed' : 'forge.config changed';
      text = running
        ? `Forge: ${what}. Restart forge-lsp to use them?`
        : this.starting || this.restarting
          ? `Forge: ${what} while forge-lsp was starting with the previous ones. Restart it to use them?`
          : `Forge: ${what}; forge-lsp is not running. Start it with the new settings?`;
    }
    const choice = await this.notify('info', text, ['Restart']);
    if (choice === 'Restart') {
      await this.restart();
    }
  }

  /**
   * Sends forge.config to the running server: resolves with the server's message when it
   * rejected it (it says so with window/showMessage), `superseded` when a later change was
   * sent meanwhile, undefined when it was taken (no rejection within 1.5 s).
   */
  private sendConfiguration(client: LanguageClient): Promise<string | undefined> {
    this.configVerdict?.(undefined, true);
    return new Promise((resolve) => {
      const verdict = (rejected: string | undefined, superseded = false) => {
        clearTimeout(timer);
        if (this.configVerdict === verdict) {
          this.configVerdict = undefined;
        }
        resolve(superseded ? 'superseded' : rejected);
      };
      const timer = setTimeout(() => verdict(undefined), 1500);
      this.configVerdict = verdict;
      client
        .sendNotification('workspace/didChangeConfiguration', { settings: { forge: readSettings().config } })
        .catch((e: unknown) => {
          this.output.appendLine(`Sending forge.config: ${e instanceof Error ? e.message : String(e)}`);
          verdict(undefined);
        });
    });
  }

  /** Runs a server tool (`forge.<tool>`): its result, or throws an Error with the server's message. */
  async tool(tool: string, input?: Record<string, unknown>): Promise<ToolResult> {
    if (this.restarting) {
      await this.restarting;
    }
    if (this.starting) {
      await this.starting;
    }
    const client = this.client;
    if (!client || !client.isRunning()) {
      throw new Error('forge-lsp is not running (see "Forge: Show Server Log")');
    }
    const result = (await client.sendRequest(ExecuteCommandRequest.type, {
      command: `forge.${tool}`,
      arguments: [input ?? {}],
    })) as ToolResult | null;
    return result ?? {};
  }

  private async fetchPlans(): Promise<PlanEntry[]> {
    if (!this.client?.isRunning()) {
      return [];
    }
    const r = await this.tool('plan-read', { recent: true });
    const plans = (r.data as { plans?: PlanEntry[] } | undefined)?.plans;
    return Array.isArray(plans) ? plans : [];
  }

  async refreshLoops(): Promise<void> {
    if (!this.client?.isRunning()) {
      return;
    }
    try {
      const r = await this.tool('loop-status');
      const list = (r.data as { loops?: LoopStatus[] } | undefined)?.loops;
      if (Array.isArray(list)) {
        this.loops.merge(list.map((l) => ({ ...l, loopName: l.loopName ?? (l as { name?: string }).name ?? '' })));
      }
    } catch (e) {
      this.report.error(`loops: ${(e as Error).message}`);
    }
  }

  async refreshAll(): Promise<void> {
    await Promise.all([this.plans.refresh(), this.refreshLoops()]);
    this.findings.reload();
  }

  /** While the Plans view is visible, its list is reloaded every few seconds. */
  private pollPlans(): void {
    if (this.pollTimer) {
      clearInterval(this.pollTimer);
      this.pollTimer = undefined;
    }
    if (this.plansView.visible) {
      void this.plans.refresh();
      this.pollTimer = setInterval(() => void this.plans.refresh(), 5000);
    }
  }

  // ----------------------------------------------------------------------------- report

  private recordDiagnostics(uris: readonly vscode.Uri[]): void {
    if (!this.report.enabled) {
      return;
    }
    for (const uri of uris) {
      const key = uri.scheme === 'file' ? uri.fsPath : uri.toString();
      const list = vscode.languages.getDiagnostics(uri).filter((d) => d.source === 'forge');
      this.report.data.diagnostics[key] = list.map((d) => ({
        finding: isFinding(d),
        line: d.range.start.line + 1,
        severity: vscode.DiagnosticSeverity[d.severity].toLowerCase(),
        message: d.message,
        code: d.code === undefined ? undefined : String(typeof d.code === 'object' ? d.code.value : d.code),
        source: d.source,
        data: (d as { data?: unknown }).data,
      }));
    }
    this.report.changed();
  }

  private recordEditors(): void {
    if (!this.report.enabled) {
      return;
    }
    const active = vscode.window.activeTextEditor?.document.uri.toString();
    this.report.data.editors = vscode.window.visibleTextEditors.map((e) => ({
      uri: e.document.uri.toString(),
      languageId: e.document.languageId,
      lineCount: e.document.lineCount,
      head: e.document.getText().slice(0, 400),
      active: e.document.uri.toString() === active,
    }));
    this.report.changed();
  }

  // ----------------------------------------------------------------------------- commands

  private registerCommands(): void {
    const reg = (id: string, fn: (...args: any[]) => unknown) =>
      this.disposables.push(
        vscode.commands.registerCommand(id, async (...args: unknown[]) => {
          try {
            const r = await fn(...args);
            this.report.command(id, true, typeof r === 'string' ? r : '');
            return r;
          } catch (e) {
            const msg = e instanceof Error ? e.message : String(e);
            this.report.command(id, false, msg);
            void vscode.window.showErrorMessage(`Forge: ${msg}`);
            return undefined;
          }
        }),
      );

    reg('forgeLsp.openPlan', (target?: unknown) => this.openPlan(target));
    reg('forgeLsp.executePlan', (arg?: unknown) => this.executePlan(arg));
    reg('forgeLsp.cancelLoop', (arg?: unknown) => this.cancelLoop(arg));
    reg('forgeLsp.restartLoop', (arg?: unknown) => this.restartLoop(arg));
    reg('forgeLsp.openLoopStatus', async (arg?: unknown) => {
      const name = await this.loopArg(arg, 'Open the status of loop', () => true);
      if (name) {
        await this.openDocument(statusUri(name));
        return name;
      }
      return undefined;
    });
    reg('forgeLsp.openWorktree', (arg?: unknown) => this.openWorktree(arg));
    reg('forgeLsp.showFindings', async () => {
      await vscode.commands.executeCommand('forgeLsp.findings.focus');
      return `${this.findings.count()} findings`;
    });
    reg('forgeLsp.showServerLog', () => this.output.show(true));
    reg('forgeLsp.restartServer', () => this.restart());
    reg('forgeLsp.refresh', () => this.refreshAll());
    reg('forgeLsp.revealFinding', async (uri: vscode.Uri, range: vscode.Range) => {
      const editor = await vscode.window.showTextDocument(uri, { preview: true });
      editor.selection = new vscode.Selection(range.start, range.start);
      editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      return `${vscode.workspace.asRelativePath(uri)}:${range.start.line + 1}`;
    });
    reg('forgeLsp.deleteFinding', async (node?: FindingNode) => {
      if (!node || node.kind !== 'finding') {
        throw new Error('choose a finding in the Findings view');
      }
      const data = (node.diagnostic as { data?: Record<string, unknown> }).data ?? {};
      const input: Record<string, unknown> = { file: data.file, line: data.line };
      if (typeof data.loopName === 'string') {
        input.loopName = data.loopName;
      }
      if (typeof data.sectionIndex === 'number') {
        input.sectionIndex = data.sectionIndex;
      } else if (data.crossSection === true) {
        input.crossSection = true;
      }
      const r = await this.tool('review-delete', input);
      return r.text ?? '';
    });
  }

  private async openDocument(uri: vscode.Uri): Promise<vscode.TextEditor> {
    const doc = await vscode.workspace.openTextDocument(uri);
    if (uri.scheme === 'forge' && doc.languageId !== 'markdown') {
      await vscode.languages.setTextDocumentLanguage(doc, 'markdown');
    }
    return vscode.window.showTextDocument(doc, { preview: false });
  }

  /** Open Plan: a forge:// URI (from the Plans view), else a pick among the recent plans. */
  private async openPlan(target?: unknown): Promise<string | undefined> {
    let uri: string | undefined;
    if (typeof target === 'string') {
      uri = target;
    } else if (target && typeof target === 'object' && typeof (target as PlanEntry).uri === 'string') {
      uri = (target as PlanEntry).uri;
    } else {
      uri = await this.pickPlan('Open plan');
    }
    if (!uri) {
      return undefined;
    }
    await this.openDocument(vscode.Uri.parse(uri));
    return uri;
  }

  private async pickPlan(title: string, sessionOnly = false): Promise<string | undefined> {
    await this.plans.refresh();
    const entries = this.plans.entries().filter((p) => !sessionOnly || !p.loopName);
    if (entries.length === 0) {
      throw new Error(sessionOnly ? 'no session plan to execute: write one first (plan-write)' : 'no plans in this project yet');
    }
    const pick = await vscode.window.showQuickPick(
      entries.map((p) => ({ label: PlansProvider.title(p), description: PlansProvider.description(p), uri: p.uri })),
      { title: `Forge: ${title}`, placeHolder: 'Recent plans of this project', matchOnDescription: true },
    );
    return pick?.uri;
  }

  /**
   * Execute Plan. The argument is the code lens's `{title, plan}`, a Plans view entry, or
   * nothing: then the plan is the session plan in the active editor, else one chosen
   * among the recent session plans.
   */
  private async executePlan(arg?: unknown): Promise<string> {
    let input: Record<string, unknown> | undefined;
    if (arg && typeof arg === 'object' && typeof (arg as { plan?: unknown }).plan === 'string') {
      input = { ...(arg as Record<string, unknown>) };
    } else {
      let uri: string | undefined;
      if (arg && typeof arg === 'object' && typeof (arg as PlanEntry).uri === 'string') {
        uri = (arg as PlanEntry).uri;
      } else {
        const active = vscode.window.activeTextEditor?.document.uri;
        if (active?.scheme === 'forge' && active.path.startsWith('/session/') && active.authority === 'plan') {
          uri = active.toString();
        } else {
          uri = await this.pickPlan('Execute plan', true);
        }
      }
      if (!uri) {
        return '';
      }
      const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(uri));
      const plan = doc.getText();
      const heading = /^#+\s+(.+)$/m.exec(plan);
      const title = await vscode.window.showInputBox({
        title: 'Forge: Execute plan',
        prompt: 'Title of the loop',
        value: heading ? heading[1].trim() : 'Plan',
        ignoreFocusOut: true,
      });
      if (title === undefined) {
        return '';
      }
      input = { title, plan };
    }
    const r = await this.tool('execute-plan', input);
    const name = (r.data as { loopName?: string } | undefined)?.loopName;
    if (name) {
      void vscode.window.showInformationMessage(`Forge: loop ${name} started.`, 'Show Loops').then((choice) => {
        if (choice === 'Show Loops') {
          void vscode.commands.executeCommand('forgeLsp.loops.focus');
        }
      });
      void this.refreshLoops();
    }
    return r.text ?? '';
  }

  /** A loop name from a Loops view item, a string, or a pick among the known loops. */
  private async loopArg(arg: unknown, title: string, filter: (l: LoopStatus) => boolean): Promise<string | undefined> {
    if (typeof arg === 'string' && arg) {
      return arg;
    }
    if (arg && typeof arg === 'object' && typeof (arg as LoopStatus).loopName === 'string') {
      return (arg as LoopStatus).loopName;
    }
    await this.refreshLoops();
    const choices = this.loops.all().filter(filter);
    if (choices.length === 0) {
      throw new Error('no loop to choose from');
    }
    const pick = await vscode.window.showQuickPick(
      choices.map((l) => ({ label: l.loopName, description: describeLoop(l) })),
      { title: `Forge: ${title}` },
    );
    return pick?.label;
  }

  private async cancelLoop(arg?: unknown): Promise<string> {
    const name = await this.loopArg(arg, 'Cancel loop', (l) => !TERMINAL.has(l.status));
    if (!name) {
      return '';
    }
    // The loop's end is told by its status notification (loops.ts), with Open Status.
    const r = await this.tool('loop-cancel', { name });
    return r.text ?? '';
  }

  private async restartLoop(arg?: unknown): Promise<string> {
    const name = await this.loopArg(arg, 'Restart loop', () => true);
    if (!name) {
      return '';
    }
    let r: ToolResult;
    try {
      r = await this.tool('loop-status', { name, restart: true });
    } catch (e) {
      const msg = (e as Error).message;
      if (!/force/i.test(msg)) {
        throw e;
      }
      const choice = await vscode.window.showWarningMessage(`Forge: ${msg}`, { modal: true }, 'Force Restart');
      if (choice !== 'Force Restart') {
        return '';
      }
      r = await this.tool('loop-status', { name, restart: true, force: true });
    }
    void vscode.window.showInformationMessage(`Forge: ${(r.text ?? `loop ${name} restarted`).split('\n')[0]}`);
    return r.text ?? '';
  }

  private async openWorktree(arg?: unknown): Promise<string> {
    const name = await this.loopArg(arg, 'Open the worktree of loop', (l) => !!l.worktreeDir);
    if (!name) {
      return '';
    }
    let dir = this.loops.get(name)?.worktreeDir ?? undefined;
    if (!dir) {
      const r = await this.tool('loop-status', { name });
      dir = (r.data as { worktreeDir?: string } | undefined)?.worktreeDir;
    }
    if (!dir || !fs.existsSync(dir)) {
      throw new Error(`the worktree of loop ${name} is gone${dir ? ` (${dir})` : ''}`);
    }
    await vscode.commands.executeCommand('vscode.openFolder', vscode.Uri.file(dir), { forceNewWindow: true });
    return dir;
  }

  dispose(): void {
    if (this.pollTimer) {
      clearInterval(this.pollTimer);
    }
    for (const d of this.disposables) {
      d.dispose();
    }
  }

  /** Stops the server (deactivation); never throws. */
  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      await this.disposeClient(client, 3000, false);
    }
  }
}

let forge: Forge | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  forge = new Forge(context);
  context.subscriptions.push(forge);
  await forge.start();
}

export async function deactivate(): Promise<void> {
  const f = forge;
  forge = undefined;
  if (f) {
    await f.stop();
    f.report.flush();
  }
}
