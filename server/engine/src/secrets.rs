//! What of the user's secrets a loop's sandbox hides (docs/sandbox.md, "Secrets"): the
//! credential files and folders under the home directory ([`SECRET_PATHS`]) and
//! secret-named environment variables ([`is_secret_env`]), adjusted by `sandbox.hidePaths`,
//! `sandbox.exposePaths` and `sandbox.exposeEnv` ([`Secrets`]). Pure apart from resolving
//! paths; `sandbox.rs` turns them into bubblewrap mounts and the shims' environment scrub.

use std::path::{Path, PathBuf};

/// Files and folders under the home directory that hold credentials. A sandboxed command
/// does not see them: a folder is an empty tmpfs inside, a file cannot be opened
/// (`/dev/null` bound over it, on a mount without devices: permission denied). What exists
/// when a command starts is covered (a loop's shims look as each shell starts).
/// `sandbox.exposePaths` keeps an entry (or every entry under a folder) visible;
/// `sandbox.hidePaths` adds to the list.
pub const SECRET_PATHS: &[&str] = &[
    // Keys, agents' keyrings, password stores.
    ".ssh",
    ".gnupg",
    ".password-store",
    ".local/share/keyrings",
    ".config/op",
    // Cloud, cluster and infrastructure credentials.
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".oci",
    ".config/doctl",
    ".docker/config.json",
    ".s3cfg",
    ".boto",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".databrickscfg",
    // Git hosts and package registries.
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    ".config/github-copilot",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    // Databases.
    ".pgpass",
    ".my.cnf",
    // The agent CLIs' logins (the CLIs run on the host or have a copy of their own).
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".claude.json",
    ".gemini/oauth_creds.json",
    ".gemini/google_accounts.json",
    ".gemini/.env",
    ".local/share/opencode/auth.json",
    // The home's `.env`, where Gemini CLI (and others) read an API key from.
    ".env",
];

/// Words that make an environment variable's name secret-like, compared without case
/// (`OPENAI_API_KEY`, `GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`).
pub const SECRET_ENV_WORDS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL"];

/// Endings that make a name secret-like (`NPM_CONFIG__AUTH`, `GH_PAT`), without case.
pub const SECRET_ENV_SUFFIXES: &[&str] = &["_AUTH", "_PAT"];

/// Whole names that are secrets without one of the words (`MYSQL_PWD`, `SSHPASS`).
pub const SECRET_ENV_NAMES: &[&str] = &["MYSQL_PWD", "SSHPASS"];

/// Forge's own secret-named variable: a loop session's token, which `forge-lsp call` inside
/// the sandbox needs (the server knows only its hash, and it works for that session alone).
pub const FORGE_TOKEN_VAR: &str = "FORGE_SESSION_TOKEN";

/// Whether a sandboxed command loses the variable `name`: a secret-like name
/// ([`SECRET_ENV_WORDS`], [`SECRET_ENV_SUFFIXES`], [`SECRET_ENV_NAMES`]) that is neither
/// [`FORGE_TOKEN_VAR`] nor one of `expose` (`sandbox.exposeEnv`).
pub fn is_secret_env(name: &str, expose: &[String]) -> bool {
    if name == FORGE_TOKEN_VAR || expose.iter().any(|e| e == name) {
        return false;
    }
    let upper = name.to_ascii_uppercase();
    SECRET_ENV_NAMES.contains(&upper.as_str())
        || SECRET_ENV_SUFFIXES.iter().any(|s| upper.ends_with(s))
        || SECRET_ENV_WORDS.iter().any(|w| upper.contains(w))
}

/// Whether `name` is a shell variable name (`[A-Za-z_][A-Za-z0-9_]*`): the only names a
/// shell lists, and so the only ones a shim can drop.
pub fn is_shell_name(name: &str) -> bool {
    let mut c = name.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_') && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// What of the user's secrets a sandbox hides (docs/sandbox.md, "Secrets"): the files and
/// folders of [`SECRET_PATHS`] and `hide`, less those under `expose`; and secret-named
/// environment variables ([`is_secret_env`]) less `expose_env`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    /// `sandbox.hidePaths`: absolute or `~/…`.
    pub hide: Vec<String>,
    /// `sandbox.exposePaths`: absolute or `~/…`.
    pub expose: Vec<String>,
    /// `sandbox.exposeEnv`: variable names.
    pub expose_env: Vec<String>,
}

impl Secrets {
    /// The configuration's `sandbox.hidePaths`, `sandbox.exposePaths`, `sandbox.exposeEnv`.
    pub fn from_config(c: &forge_core::config::Config) -> Secrets {
        Secrets {
            hide: c.sandbox_hide_paths.clone(),
            expose: c.sandbox_expose_paths.clone(),
            expose_env: c.sandbox_expose_env.clone(),
        }
    }
}

/// `~/x` against `home`, an absolute path as it is; anything else (or `~/` without a home)
/// is `None`.
fn expand(entry: &str, home: Option<&Path>) -> Option<PathBuf> {
    match entry.strip_prefix("~/") {
        Some(rest) => home.map(|h| h.join(rest)),
        None => Path::new(entry).is_absolute().then(|| PathBuf::from(entry)),
    }
}

/// Folders that stay visible, with all they hold, whatever `sandbox.hidePaths` says:
/// hiding one of them (or a folder holding one) could leave the sandbox without a shell,
/// its programs' alternatives or a `/dev`.
const SYSTEM_DIRS: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev", "/proc", "/sys", "/nix", "/gnu"];

/// Whether hiding `p` (resolved) could break every sandbox: `/`, a [`SYSTEM_DIRS`] folder,
/// anything under one, or a folder holding one.
fn is_system_path(p: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| Path::new(d).starts_with(p) || p.starts_with(d))
}

/// `p` resolved: its real path when it exists, else the real path of its nearest existing
/// folder with the rest appended (a credential folder that appears later is found where it
/// will be). A link on the way whose target does not exist yet counts as its target (at
/// most 8 such links). `None` when the rest steps up (`..`) or there are more links.
fn resolve(p: &Path, links: u32) -> Option<PathBuf> {
    let mut rest = vec![];
    let mut cur = p;
    loop {
        let base = match cur.canonicalize() {
            Ok(real) => Some(real),
            Err(_) => match std::fs::read_link(cur) {
                Ok(target) if links < 8 => {
                    let target = if target.is_absolute() { target } else { cur.parent()?.join(target) };
                    Some(resolve(&target, links + 1)?)
                }
                Ok(_) => return None,
                Err(_) => None,
            },
        };
        if let Some(mut out) = base {
            out.extend(rest.iter().rev());
            return Some(out);
        }
        rest.push(cur.file_name()?);
        cur = cur.parent()?;
    }
}

/// The names of this process's environment variables that a sandboxed command does not
/// get ([`is_secret_env`]).
pub fn secret_vars_here(expose: &[String]) -> Vec<std::ffi::OsString> {
    std::env::vars_os().map(|(k, _)| k).filter(|k| is_secret_env(&k.to_string_lossy(), expose)).collect()
}

/// The paths a sandbox hides for the home directories `homes` (`~/…` entries under each), resolved ([`resolve`]), once
/// each, existing or not: [`SECRET_PATHS`] (not under an `expose` entry), `hide`, and
/// `<data_dir>/agent-homes`. Left out: what resolves under `/tmp` (private inside anyway)
/// but inside or around one of the folders `shown` there (an agent CLI's install folder), and system folders ([`is_system_path`], with a warning), but a default entry that
/// resolves to a file there.
pub fn secret_candidates(
    homes: &[&Path],
    secrets: &Secrets,
    data_dir: Option<&Path>,
    shown: &[PathBuf],
) -> Vec<PathBuf> {
    // An entry `~/…` stands for the same path under each home; an absolute one for itself.
    let expand_all = |e: &String| -> Vec<PathBuf> {
        match homes {
            [] => expand(e, None).into_iter().collect(),
            _ => homes.iter().filter_map(|h| expand(e, Some(h))).collect(),
        }
    };
    let exposed: Vec<PathBuf> = secrets.expose.iter().flat_map(expand_all).collect();
    // Also as they resolve: an entry spelled through a link (a HOME that links to the
    // account's home) exposes the same folder under the other spelling.
    let exposed_real: Vec<PathBuf> = exposed.iter().filter_map(|e| resolve(e, 0)).collect();
    let moved = relocated(|k| std::env::var_os(k));
    let defaults = homes
        .iter()
        .flat_map(|h| SECRET_PATHS.iter().map(move |rel| h.join(rel)))
        .chain(moved)
        .filter(|p| !exposed.iter().any(|e| p.starts_with(e)))
        .filter(|p| resolve(p, 0).is_none_or(|r| !exposed_real.iter().any(|e| r.starts_with(e))));
    let added = secrets.hide.iter().flat_map(expand_all).map(|p| (p, false));
    let agent_homes = data_dir.map(|d| (d.join("agent-homes"), true));
    let mut out: Vec<PathBuf> = vec![];
    for (p, ours) in defaults.map(|p| (p, true)).chain(added).chain(agent_homes) {
        let Some(real) = resolve(&p, 0) else { continue };
        // Hidden also when it holds an install folder (its tmpfs hides that too: the CLI then
        // fails, as it would outside /tmp).
        let private = real.starts_with("/tmp") && !shown.iter().any(|d| real.starts_with(d) || d.starts_with(&real));
        if private || out.contains(&real) {
            continue;
        }
        // A default entry that is the user's own link to a file in a system folder (a
        // home-manager `~/.npmrc` in `/nix/store`) is hidden: one file, named by us.
        let own_file = ours && real.is_file();
        if is_system_path(&real) && !own_file {
            tracing::warn!(
                "{} is not hidden in the sandbox: it is or resolves into {}, which the sandbox needs",
                p.display(),
                real.display()
            );
            continue;
        }
        out.push(real);
    }
    out
}

/// The home directories whose secrets a sandbox hides ([`forge_core::project::homes`]):
/// the account's own home in the password database only when it is none of `/` and the
/// system folders (a service account's `/usr/sbin` would name `/usr/sbin/.ssh` and the
/// like, and its `~/…` entries top-level folders; a review).
pub fn homes() -> Vec<PathBuf> {
    let mut all = forge_core::project::homes().into_iter();
    let first = all.next();
    first.into_iter().chain(all.filter(|h| !is_system_path(h))).collect()
}

/// Where the environment moves a [`SECRET_PATHS`] entry away from the home directory: an
/// entry that starts with the prefix is also hidden at the variable's value joined with
/// the rest (a review found an OpenCode login under `$XDG_DATA_HOME` readable in the
/// sandbox). A variable that names files (`KUBECONFIG`) is a `:`-separated list.
pub const RELOCATIONS: &[(&str, &str, &str)] = &[
    // (entry prefix, variable, what replaces the prefix under the variable's value)
    (".config/", "XDG_CONFIG_HOME", ""),
    (".local/share/", "XDG_DATA_HOME", ""),
    (".codex/", "CODEX_HOME", ""),
    (".claude/", "CLAUDE_CONFIG_DIR", ""),
    (".claude.json", "CLAUDE_CONFIG_DIR", ".claude.json"),
    (".gemini/", "GEMINI_CLI_HOME", ".gemini/"),
    (".docker/", "DOCKER_CONFIG", ""),
    (".cargo/", "CARGO_HOME", ""),
    (".gnupg", "GNUPGHOME", ""),
    (".password-store", "PASSWORD_STORE_DIR", ""),
    (".netrc", "NETRC", ""),
    (".npmrc", "NPM_CONFIG_USERCONFIG", ""),
    (".aws", "AWS_SHARED_CREDENTIALS_FILE", ""),
    (".aws", "AWS_CONFIG_FILE", ""),
    (".kube", "KUBECONFIG", ""),
    // npm reads its variables in either case, lowercase being the usual spelling.
    (".npmrc", "npm_config_userconfig", ""),
    (".config/gh", "GH_CONFIG_DIR", ""),
    (".config/gcloud", "CLOUDSDK_CONFIG", ""),
    (".config/op", "OP_CONFIG_DIR", ""),
    (".config/hub", "HUB_CONFIG", ""),
    (".config/glab-cli", "GLAB_CONFIG_DIR", ""),
    (".azure", "AZURE_CONFIG_DIR", ""),
    (".pgpass", "PGPASSFILE", ""),
    (".boto", "BOTO_CONFIG", ""),
    (".oci", "OCI_CLI_CONFIG_FILE", ""),
    (".databrickscfg", "DATABRICKS_CONFIG_FILE", ""),
];

/// The [`SECRET_PATHS`] entries at the places `var` (the environment) moves them to
/// ([`RELOCATIONS`]); absolute values only.
pub fn relocated(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Vec<PathBuf> {
    let mut out = vec![];
    for (prefix, name, replacement) in RELOCATIONS {
        let Some(value) = var(name).filter(|v| !v.is_empty()) else { continue };
        let values: Vec<PathBuf> =
            if *name == "KUBECONFIG" { std::env::split_paths(&value).collect() } else { vec![PathBuf::from(value)] };
        for base in values.into_iter().filter(|b| b.is_absolute()) {
            for rel in SECRET_PATHS {
                let Some(rest) = rel.strip_prefix(prefix) else { continue };
                // Whole components: `.config/gh` is not `.config/github-copilot`.
                if !prefix.ends_with('/') && !rest.is_empty() && !rest.starts_with('/') {
                    continue;
                }
                let tail = format!("{replacement}{rest}");
                out.push(if tail.is_empty() { base.clone() } else { base.join(tail) });
            }
        }
    }
    out
}

/// What a sandbox mounts over now: each [`secret_candidates`] path that exists and is not
/// a link (bubblewrap cannot mount over one), with whether it is a folder (an empty tmpfs
/// inside) or not (`/dev/null` bound over it).
pub fn secret_mounts(
    homes: &[&Path],
    secrets: &Secrets,
    data_dir: Option<&Path>,
    shown: &[PathBuf],
) -> Vec<(PathBuf, bool)> {
    secret_candidates(homes, secrets, data_dir, shown)
        .into_iter()
        .filter_map(|p| {
            let m = std::fs::symlink_metadata(&p).ok().filter(|m| !m.file_type().is_symlink())?;
            Some((p, m.is_dir()))
        })
        .collect()
}

/// The part of a shim that drops the secret-named variables ([`is_secret_env`]) from its
/// environment before it starts the sandbox: the shim runs in the agent's environment,
/// known only then. Builtins only (nothing found through `PATH`): each line of `export -p`
/// that starts a variable (`export NAME=…`, bash's `declare -x NAME=…`) names one. A line
/// of a value that looks like one can only make it unset a variable that may not exist.
pub(crate) fn env_scrub_sh(expose: &[String]) -> String {
    let kept: String = expose.iter().filter(|n| is_shell_name(n)).map(|n| format!("|{n}")).collect();
    let nocase = |w: &str| -> String {
        w.chars()
            .map(|ch| match ch {
                'A'..='Z' | 'a'..='z' => format!("[{}{}]", ch.to_ascii_uppercase(), ch.to_ascii_lowercase()),
                _ => ch.to_string(),
            })
            .collect()
    };
    let mut secret: Vec<String> = SECRET_ENV_WORDS.iter().map(|w| format!("*{}*", nocase(w))).collect();
    secret.extend(SECRET_ENV_SUFFIXES.iter().map(|w| format!("*{}", nocase(w))));
    secret.extend(SECRET_ENV_NAMES.iter().map(|w| nocase(w)));
    format!(
        "set -f\nforge_ifs=$IFS\nIFS='\n'\nfor forge_line in $(export -p); do\n  case $forge_line in\n    'export '*) forge_name=${{forge_line#export }} ;;\n    'declare -x '*) forge_name=${{forge_line#declare -x }} ;;\n    *) continue ;;\n  esac\n  forge_name=${{forge_name%%=*}}\n  case $forge_name in\n    ''|*[!A-Za-z0-9_]*|[0-9]*|{FORGE_TOKEN_VAR}{kept}) ;;\n    {}) unset \"$forge_name\" ;;\n  esac\ndone\nIFS=$forge_ifs\nset +f\nunset forge_ifs forge_line forge_name\n",
        secret.join("|")
    )
}

/// A folder for test files outside `/tmp` (which [`secret_mounts`] leaves out and a
/// sandbox makes private): the target directory the test binary runs from.
#[cfg(test)]
pub(crate) fn outside_tmp() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).expect("target directory").to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_moved_by_the_environment_are_hidden_where_they_are() {
        let env = |k: &str| -> Option<std::ffi::OsString> {
            match k {
                "XDG_DATA_HOME" => Some("/d/data".into()),
                "XDG_CONFIG_HOME" => Some("/d/config".into()),
                "CLAUDE_CONFIG_DIR" => Some("/d/claude".into()),
                "CODEX_HOME" => Some("/d/codex".into()),
                "GEMINI_CLI_HOME" => Some("/d/g".into()),
                "KUBECONFIG" => Some("/d/k1:/d/k2".into()),
                "AWS_SHARED_CREDENTIALS_FILE" => Some("/d/aws-creds".into()),
                "npm_config_userconfig" => Some("/d/npmrc".into()),
                "GH_CONFIG_DIR" => Some("/d/gh".into()),
                "PGPASSFILE" => Some("/d/pgpass".into()),
                "GNUPGHOME" => Some("relative/gpg".into()),
                _ => None,
            }
        };
        let got = relocated(env);
        for want in [
            "/d/data/opencode/auth.json",
            "/d/data/keyrings",
            "/d/config/gh",
            "/d/config/gcloud",
            "/d/claude/.credentials.json",
            "/d/claude/.claude.json",
            "/d/codex/auth.json",
            "/d/g/.gemini/oauth_creds.json",
            "/d/k1",
            "/d/k2",
            "/d/aws-creds",
            "/d/npmrc",
            "/d/gh",
            "/d/pgpass",
        ] {
            assert!(got.contains(&PathBuf::from(want)), "{want} not in {got:?}");
        }
        // Whole components: GH_CONFIG_DIR moves `.config/gh`, not `.config/github-copilot`.
        assert!(!got.iter().any(|p| p.starts_with("/d/gh") && p != Path::new("/d/gh")), "{got:?}");
        // A relative value names no place: ignored.
        assert!(!got.iter().any(|p| p.starts_with("relative")), "{got:?}");
        assert!(relocated(|_| None).is_empty());
    }

    #[test]
    fn secret_like_variable_names() {
        let expose = vec!["NPM_TOKEN".to_string()];
        for (name, secret) in [
            ("OPENAI_API_KEY", true),
            ("ANTHROPIC_API_KEY", true),
            ("GITHUB_TOKEN", true),
            ("gh_token", true),
            ("AWS_SECRET_ACCESS_KEY", true),
            ("AWS_ACCESS_KEY_ID", true),
            ("PGPASSWORD", true),
            ("MYSQL_PWD", true),
            ("SSHPASS", true),
            ("GH_PAT", true),
            ("GPG_PASSPHRASE", true),
            ("FORGE_API_TOKEN", true),
            ("LD_LIBRARY_PATH", false),
            ("GOOGLE_APPLICATION_CREDENTIALS", true),
            ("NPM_CONFIG__AUTH", true),
            ("NPM_TOKEN", false),
            ("FORGE_SESSION_TOKEN", false),
            ("FORGE_LSP_SOCKET", false),
            ("FORGE_SESSION_ID", false),
            ("PATH", false),
            ("HOME", false),
            ("GIT_AUTHOR_NAME", false),
            ("SSH_AUTH_SOCK", false),
        ] {
            assert_eq!(is_secret_env(name, &expose), secret, "{name}");
        }
    }

    #[test]
    fn secret_mounts_hide_the_defaults_that_exist_less_the_exposed_plus_the_added() {
        let home = tempfile::Builder::new().prefix("fl-home").tempdir_in(outside_tmp()).unwrap();
        let h = home.path().canonicalize().unwrap();
        let elsewhere = tempfile::Builder::new().prefix("fl-aws").tempdir_in(outside_tmp()).unwrap();
        let aws = elsewhere.path().canonicalize().unwrap();
        std::fs::create_dir_all(h.join(".ssh")).unwrap();
        std::fs::write(h.join(".npmrc"), "//registry/:_authToken=x").unwrap();
        std::fs::write(h.join(".netrc"), "machine x password y").unwrap();
        std::fs::create_dir_all(h.join(".docker")).unwrap();
        std::fs::write(h.join(".docker/config.json"), "{}").unwrap();
        std::os::unix::fs::symlink(&aws, h.join(".aws")).unwrap();
        std::fs::create_dir_all(h.join("private")).unwrap();
        std::fs::write(h.join("notes.txt"), "not a secret").unwrap();
        let data = h.join("data");
        std::fs::create_dir_all(data.join("agent-homes")).unwrap();
        let secrets = Secrets {
            hide: vec![
                "~/private".into(),
                "~/missing".into(),
                "/tmp".into(),
                "/usr".into(),
                "/usr/lib".into(),
                "/".into(),
                "/etc".into(),
                "/etc/alternatives".into(),
                "/nix".into(),
                format!("~/{}usr", "../".repeat(h.components().count())),
            ],
            expose: vec!["~/.npmrc".into(), "~/.docker".into()],
            expose_env: vec![],
        };
        let got = secret_mounts(&[&h], &secrets, Some(&data), &[]);
        assert_eq!(
            got,
            vec![
                (h.join(".ssh"), true),
                (aws.clone(), true),
                (h.join(".netrc"), false),
                (h.join("private"), true),
                (data.join("agent-homes"), true),
            ],
            "defaults that exist (a link's target), not .npmrc nor what is under .docker, the added folder, the agents' homes; nothing missing, nothing under /tmp"
        );
        // Two homes (HOME and the account's own): the defaults and `~/…` entries under each,
        // exposed under each.
        let second = tempfile::Builder::new().prefix("fl-home2").tempdir_in(outside_tmp()).unwrap();
        let h2 = second.path().canonicalize().unwrap();
        for d in [".ssh", "private", ".docker"] {
            std::fs::create_dir_all(h2.join(d)).unwrap();
        }
        std::fs::write(h2.join(".docker/config.json"), "{}").unwrap();
        let both = secret_mounts(&[&h, &h2], &secrets, None, &[]);
        for p in [h.join(".ssh"), h2.join(".ssh"), h.join("private"), h2.join("private")] {
            assert!(both.contains(&(p.clone(), true)), "{} in {both:?}", p.display());
        }
        assert!(!both.iter().any(|(p, _)| p.starts_with(h2.join(".docker"))), "{both:?}");
        // An entry spelled through a link exposes the folder it names (HOME a link to the
        // account's home).
        let link = tempfile::Builder::new().prefix("fl-hlink").tempdir_in(outside_tmp()).unwrap();
        let hl = link.path().join("home");
        std::os::unix::fs::symlink(&h, &hl).unwrap();
        let via_link = Secrets { expose: vec![hl.join(".ssh").display().to_string()], ..Secrets::default() };
        let got = secret_mounts(&[&h], &via_link, None, &[]);
        assert!(!got.iter().any(|(p, _)| p == &h.join(".ssh")) && got.contains(&(h.join(".netrc"), false)), "{got:?}");
        // Under /tmp (private inside) only what is inside or around a folder bound back.
        let tmp = tempfile::Builder::new().prefix("fl-shown").tempdir_in("/tmp").unwrap();
        let t = tmp.path().canonicalize().unwrap();
        let shown = [t.join("p/node_modules")];
        let around = Secrets {
            hide: vec![
                t.display().to_string(),
                t.join("p/node_modules/.npmrc").display().to_string(),
                "/tmp/fl-elsewhere".into(),
            ],
            ..Secrets::default()
        };
        let in_tmp = |c: Vec<PathBuf>| c.into_iter().filter(|p| p.starts_with("/tmp")).collect::<Vec<_>>();
        assert_eq!(
            in_tmp(secret_candidates(&[], &around, None, &shown)),
            vec![t.clone(), t.join("p/node_modules/.npmrc")]
        );
        assert_eq!(in_tmp(secret_candidates(&[], &around, None, &[])), Vec::<PathBuf>::new());
        // No home: only absolute entries and the data directory.
        let abs = Secrets { hide: vec![h.join("notes.txt").display().to_string(), "~/x".into()], ..Secrets::default() };
        assert_eq!(secret_mounts(&[], &abs, None, &[]), vec![(h.join("notes.txt"), false)]);
        // The candidates (what a shim looks for as it runs) hold the missing ones too,
        // resolved where they would be, and the same system folders are left out.
        let c = secret_candidates(&[&h], &secrets, Some(&data), &[]);
        for p in [h.join(".gnupg"), h.join("missing"), h.join(".ssh"), data.join("agent-homes")] {
            assert!(c.contains(&p), "{} in {c:?}", p.display());
        }
        assert!(!c.contains(&h.join(".npmrc")) && !c.iter().any(|p| p.starts_with("/usr") || p == Path::new("/")));
        assert!(!c.iter().any(|p| p == Path::new("/etc") || p.starts_with("/tmp")), "{c:?}");
        // A link whose target does not exist yet is looked at as its target.
        std::os::unix::fs::symlink(h.join("dotfiles/gh"), h.join(".config-gh-link")).unwrap();
        let dangling = Secrets { hide: vec!["~/.config-gh-link".into()], ..Secrets::default() };
        assert_eq!(secret_candidates(&[&h], &dangling, None, &[]).last(), Some(&h.join("dotfiles/gh")));
        // ... and a link above a path, whose target does not exist yet either.
        std::os::unix::fs::symlink(h.join("dotfiles/codex"), h.join(".codex")).unwrap();
        let above = secret_candidates(&[&h], &Secrets::default(), None, &[]);
        assert!(above.contains(&h.join("dotfiles/codex/auth.json")), "{above:?}");
        // A default entry that is a link to a file in a system folder is hidden (one file);
        // a folder there, or an entry of hidePaths there, is not.
        std::os::unix::fs::symlink("/etc/hostname", h.join(".pgpass")).unwrap();
        std::os::unix::fs::symlink("/etc/ssh", h.join(".azure")).unwrap();
        let sys = Secrets { hide: vec!["/etc/hostname".into()], ..Secrets::default() };
        let c = secret_candidates(&[&h], &sys, None, &[]);
        if Path::new("/etc/hostname").is_file() {
            assert_eq!(c.iter().filter(|p| *p == Path::new("/etc/hostname")).count(), 1, "{c:?}");
        }
        assert!(!c.iter().any(|p| p.starts_with("/etc/ssh")), "{c:?}");
        // Without a home, only what the environment moves elsewhere (CARGO_HOME, say).
        let only_added = secret_candidates(&[], &sys, None, &[]);
        let moved = relocated(|k| std::env::var_os(k));
        assert!(
            only_added.iter().all(|p| moved.iter().any(|m| p.starts_with(m) || m.starts_with(p))),
            "{only_added:?}"
        );
        // A link in the way resolves: a folder that does not exist yet under the linked one.
        let linked = Secrets { hide: vec!["~/.aws/sub/key".into()], ..Secrets::default() };
        assert!(secret_candidates(&[&h], &linked, None, &[]).contains(&aws.join("sub/key")));
    }

    #[test]
    fn the_env_scrub_keeps_forge_and_exposed_names_and_survives_odd_values() {
        let script = format!("{}env", env_scrub_sh(&["NPM_TOKEN".to_string(), "bad name".to_string()]));
        for shell in ["/bin/sh", "/bin/bash"].into_iter().filter(|s| Path::new(s).exists()) {
            let out = std::process::Command::new(shell)
                .args(["-c", &script])
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("OPENAI_API_KEY", "s1")
                .env("github_token", "s2")
                .env("NPM_CONFIG__AUTH", "s3")
                .env("NPM_TOKEN", "kept")
                .env("FORGE_API_TOKEN", "s4")
                .env("MYSQL_PWD", "s5")
                .env("GH_PAT", "s6")
                .env("FORGE_SESSION_TOKEN", "kept")
                .env("LIST", "a*b ?")
                .env("MULTI", "line\nexport FAKE_SECRET=1\ndeclare -x PATH=x\n")
                .env("SPACED", "  two  spaces ")
                .output()
                .unwrap();
            assert!(out.status.success(), "{shell}: {out:?}");
            let env = String::from_utf8_lossy(&out.stdout);
            let names: Vec<&str> = env.lines().filter_map(|l| l.split_once('=').map(|(n, _)| n)).collect();
            for gone in ["OPENAI_API_KEY", "github_token", "NPM_CONFIG__AUTH", "FORGE_API_TOKEN", "MYSQL_PWD", "GH_PAT"]
            {
                assert!(!names.contains(&gone), "{shell}: {gone} in {env}");
            }
            for kept in [
                "NPM_TOKEN=kept",
                "FORGE_SESSION_TOKEN=kept",
                "LIST=a*b ?",
                "SPACED=  two  spaces ",
                "PATH=/usr/bin:/bin",
            ] {
                assert!(env.lines().any(|l| l == kept), "{shell}: {kept} not in {env}");
            }
            assert!(env.contains("MULTI=line\nexport FAKE_SECRET=1\n"), "{shell}: {env}");
            for var in ["forge_ifs", "forge_line", "forge_name"] {
                assert!(!names.contains(&var), "{shell}: {var} left set");
            }
        }
    }
}
