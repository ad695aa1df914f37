// Finding and checking the forge-lsp binary.
//
// Order: the `forge.server.path` setting; else `forge-lsp` on PATH; else a binary shipped
// inside the extension (`<extension>/bin/forge-lsp`, for platform-specific .vsix builds);
// else `~/.cargo/bin/forge-lsp` (where `cargo install` puts it).

import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';

export const BINARY = process.platform === 'win32' ? 'forge-lsp.exe' : 'forge-lsp';

export interface ServerSettings {
  path: string;
  args: string[];
  dataDir: string;
  config: Record<string, unknown>;
}

/**
 * A setting from the user's (or machine's) settings only, never a workspace's or folder's:
 * a repository's `.vscode/settings.json` must not choose the program started, its
 * arguments, the data directory or the server's configuration (trust, the agent program,
 * the sandbox). The settings are declared `machine`, which VS Code enforces;
 * this holds even where it would not.
 */
export function userSetting<T>(c: vscode.WorkspaceConfiguration, key: string): T | undefined {
  const i = c.inspect<T>(key);
  return i?.globalValue ?? i?.defaultValue;
}

export function readSettings(): ServerSettings {
  const c = vscode.workspace.getConfiguration('forge');
  const config = userSetting<Record<string, unknown>>(c, 'config');
  return {
    path: (userSetting<string>(c, 'server.path') ?? '').trim(),
    args: (userSetting<string[]>(c, 'server.args') ?? []).filter((a) => typeof a === 'string'),
    dataDir: (userSetting<string>(c, 'dataDir') ?? '').trim(),
    config: config && typeof config === 'object' && !Array.isArray(config) ? config : {},
  };
}

/** `~`, `${userHome}` and `${workspaceFolder}` in paths from settings. */
export function expandPath(p: string): string {
  if (!p) {
    return p;
  }
  const home = os.homedir();
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? '';
  let out = p.replace(/\$\{userHome\}/g, home).replace(/\$\{workspaceFolder\}/g, folder);
  if (out === '~' || out.startsWith('~/')) {
    out = path.join(home, out.slice(1));
  }
  return out;
}

function isExecutable(file: string): boolean {
  try {
    const st = fs.statSync(file);
    if (!st.isFile()) {
      return false;
    }
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir) {
      const candidate = path.join(dir, name);
      if (isExecutable(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

export interface Resolved {
  /** The binary to start, when one was found. */
  path?: string;
  /** How it was found (for the log), or what was tried (for the error). */
  how: string;
}

export function resolveServer(settings: ServerSettings, extensionPath: string): Resolved {
  if (settings.path) {
    const p = expandPath(settings.path);
    if (p.includes('/') || p.includes(path.sep)) {
      const abs = path.isAbsolute(p)
        ? p
        : path.resolve(vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? process.cwd(), p);
      return isExecutable(abs)
        ? { path: abs, how: `forge.server.path (${abs})` }
        : { how: `forge.server.path is "${settings.path}", and ${abs} is not an executable file` };
    }
    const found = onPath(p);
    return found
      ? { path: found, how: `forge.server.path "${p}" found on PATH at ${found}` }
      : { how: `forge.server.path is "${p}", which is not on PATH` };
  }
  const fromPath = onPath(BINARY);
  if (fromPath) {
    return { path: fromPath, how: `${BINARY} on PATH (${fromPath})` };
  }
  const bundled = path.join(extensionPath, 'bin', BINARY);
  if (isExecutable(bundled)) {
    return { path: bundled, how: `the binary bundled with the extension (${bundled})` };
  }
  const cargo = path.join(os.homedir(), '.cargo', 'bin', BINARY);
  if (isExecutable(cargo)) {
    return { path: cargo, how: `${cargo}` };
  }
  return { how: `${BINARY} is not on PATH, not bundled in ${path.dirname(bundled)}, and not in ${path.dirname(cargo)}` };
}

/** Runs `<binary> --version`: the version line, or throws an Error saying what went wrong. */
export function checkBinary(binary: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(binary, ['--version'], { timeout: 10_000 }, (err, stdout, stderr) => {
      if (err) {
        const e = err as NodeJS.ErrnoException & { killed?: boolean; code?: string | number };
        let why: string;
        if (e.code === 'ENOENT') {
          why = 'it does not exist';
        } else if (e.code === 'EACCES') {
          why = 'it is not executable';
        } else if (e.killed) {
          why = 'it did not answer `--version` within 10 s';
        } else {
          const detail = (stderr || stdout || e.message || '').trim().split('\n').slice(-3).join(' ');
          why = `\`${path.basename(binary)} --version\` failed${typeof e.code === 'number' ? ` (exit ${e.code})` : ''}: ${detail}`;
        }
        reject(new Error(why));
        return;
      }
      const line = stdout.trim().split('\n')[0] ?? '';
      if (!/forge/i.test(line)) {
        reject(new Error(`\`${path.basename(binary)} --version\` printed "${line}", not forge-lsp's version`));
        return;
      }
      resolve(line);
    });
  });
}

export const INSTALL_HINT =
  'Install forge-lsp (from the repository: `cargo install --path server/cli`, or a release binary) and put it on PATH, or set "forge.server.path" to the binary.';
