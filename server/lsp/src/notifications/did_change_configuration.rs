//! `workspace/didChangeConfiguration` (section `forge`): merged over the files and the
//! initialization options. A wrong type is reported and the previous configuration kept.

use serde_json::Value;
use tower_lsp_server::gen_lsp_types::{DidChangeConfigurationParams, MessageType};

use crate::server::Backend;
use forge_core::config::Loader;

pub async fn did_change_configuration(backend: &Backend, params: DidChangeConfigurationParams) {
    let Ok(conn) = backend.conn() else { return };
    let settings = params.settings;
    let forge = settings.get("forge").cloned().unwrap_or(Value::Null);
    if forge.is_null() {
        return;
    }
    let env = conn.env();
    let init = conn.init_config.lock().expect("init config").clone();
    let result = Loader::standard(&env.project.root, init.as_ref()).and_then(|mut l| {
        l.add_value(&forge, "workspace/didChangeConfiguration (section forge)")?;
        Ok(l)
    });
    match result {
        Ok(loader) => {
            for w in &loader.warnings {
                conn.client.show_message(MessageType::Warning, format!("forge-lsp: {w}")).await;
            }
            let mut next = (*env).clone();
            next.config = loader.build();
            conn.set_env(next);
        }
        Err(e) => {
            conn.client
                .show_message(MessageType::Error, format!("forge-lsp: {e}; the previous configuration stays in effect"))
                .await;
        }
    }
}
