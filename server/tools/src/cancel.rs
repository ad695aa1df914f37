//! Which calls a client's cancel may stop.
//!
//! A front end runs a call inside [`scope`] with a flag of its own and, when the client
//! cancels, drops the call's future only while the flag is down. A built-in tool raises it
//! ([`shield`]) as soon as it is resolved: its write is committed whole and its effects do
//! not stop halfway, so it runs to the end and is answered with what it did (LSP lets a
//! server answer a cancelled request with its result). Dropping it instead would tell the
//! client "cancelled" for a write that the store still commits. A plugin tool, a shell
//! command and a read-only tool never raise it (a cancel kills the process; a search stops
//! its walk at [`crate::ToolCtx::cancel_flag`]), unless the read-only tool left engine work
//! (`loop-status`'s restart).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

tokio::task_local! {
    static SHIELD: Arc<AtomicBool>;
}

/// Runs `fut` with `flag` as the shield [`shield`] raises.
pub async fn scope<F: std::future::Future>(flag: Arc<AtomicBool>, fut: F) -> F::Output {
    SHIELD.scope(flag, fut).await
}

/// From here on the call runs to the end (module docs); nothing outside a [`scope`].
pub fn shield() {
    let _ = SHIELD.try_with(|f| f.store(true, Ordering::Release));
}

/// Whether the call holding `flag` may still be dropped.
pub fn cancellable(flag: &AtomicBool) -> bool {
    !flag.load(Ordering::Acquire)
}
