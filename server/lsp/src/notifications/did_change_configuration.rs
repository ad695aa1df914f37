//! `workspace/didChangeConfiguration` (section `forge`): merged over the files and the
//! initialization options. A wrong type is reported and the previous configuration kept.
//!
//! A loop session's connection keeps its loop's configuration: an agent holding the loop's
//! socket and token cannot lift the loop's permissions or trust project tools with a
//! notification. Trust keys are never read from settings ([`Loader::add_settings`]): an
//! editor may fill them from the project's own files. Warnings are shown once per connection (the files' warnings were shown
//! after `initialized` already).

use serde_json::Value;
use tower_lsp_server::gen_lsp_types::{DidChangeConfigurationParams, MessageType};

use crate::server::Backend;
use forge_core::config::Loader;

pub async fn did_change_configuration(backend: &Backend, params: DidChangeConfigurationParams) {
    let Ok(conn) = backend.conn() else { return };
    let env = conn.env();
    if env.caller.binding.is_some() {
        tracing::warn!(
            session = %env.caller.session_id,
            "workspace/didChangeConfiguration from a loop session ignored: it runs with its loop's configuration"
        );
        return;
    }
    let Some(forge) = configuration_of(params.settings.get("forge")) else { return };
    let init = conn.init_config.lock().expect("init config").clone();
    let result = Loader::standard(&env.project.root, init.as_ref()).and_then(|mut l| {
        l.add_settings(&forge, "workspace/didChangeConfiguration (section forge)")?;
        Ok(l)
    });
    match result {
        Ok(loader) => {
            // In effect before the first await: changes are applied in the order they were
            // read (the transport first-polls each handler in arrival order). Set after
            // the warnings were shown, a change with warnings took effect after a later
            // one and undid it (review BB).
            let mut next = (*env).clone();
            next.config = loader.build();
            conn.set_env(next);
            for w in &loader.warnings {
                conn.warn_config_once(w).await;
            }
        }
        Err(e) => {
            conn.client
                .show_message(MessageType::Error, format!("forge-lsp: {e}; the previous configuration stays in effect"))
                .await;
        }
    }
}

/// The configuration in a `forge` settings section. A client that sends its initialization
/// options as settings too (Helix sends its `config` both ways) gives the shape of
/// `initializationOptions.forge`: `{ agent: "<kind>", session, token, dataDir, config }`.
/// Then only `config` is configuration; the rest is fixed at `initialize` and ignored here,
/// not reported as unknown keys. (`agent` as a table is the configuration's own section.)
fn configuration_of(forge: Option<&Value>) -> Option<Value> {
    let Some(Value::Object(m)) = forge else {
        return forge.filter(|v| !v.is_null()).cloned();
    };
    let init_shaped = m.get("agent").is_some_and(Value::is_string)
        || ["session", "token", "dataDir", "config"].iter().any(|k| m.contains_key(*k));
    if !init_shaped {
        return Some(Value::Object(m.clone()));
    }
    match m.get("config") {
        Some(c) if !c.is_null() => Some(c.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::configuration_of;
    use serde_json::json;

    #[test]
    fn settings_in_the_shape_of_the_initialization_options_give_their_config() {
        for (forge, want) in [
            (json!(null), None),
            (json!({ "documents": { "maxPlanBytes": 10 } }), Some(json!({ "documents": { "maxPlanBytes": 10 } }))),
            (json!({ "agent": { "command": "x" } }), Some(json!({ "agent": { "command": "x" } }))),
            // Helix: `config = { forge = { agent = "user" } }` as settings.
            (json!({ "agent": "user" }), None),
            (
                json!({ "agent": "user", "config": { "loop": { "maxIterations": 3 } } }),
                Some(json!({ "loop": { "maxIterations": 3 } })),
            ),
            (json!({ "session": "ses_x", "dataDir": "/d" }), None),
            // Not an object: passed on, so that the loader names the wrong type.
            (json!(3), Some(json!(3))),
        ] {
            assert_eq!(configuration_of(Some(&forge)), want, "{forge}");
        }
        assert_eq!(configuration_of(None), None);
    }
}
