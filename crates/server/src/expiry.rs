//! Active expiry. Expired keys are already invisible (the engine checks
//! expiry on every read, which is Redis's lazy expiry); this task walks the
//! key space in the background and drops them so their memory and log
//! space come back without anyone touching them, as Redis's active expiry
//! cycle does.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::server::Shared;

/// Keys examined per step.
const STEP_KEYS: usize = 1000;
/// Pause between steps when few of the keys examined had expired.
const PAUSE: Duration = Duration::from_millis(100);

pub async fn active_expiry(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        // A client's key dropped here is Redis's `expired` event (its
        // collections' entries under reserved keys are not keys to them).
        let mut expired = Vec::new();
        let notify = crate::notify::wanted(shared.notify_flags.load(Ordering::Relaxed), crate::notify::EXPIRED)
            || shared.tracking.active();
        let (next, dropped) = shared.db.purge_expired(cursor.as_deref(), STEP_KEYS, |key| {
            if notify && !crate::keyspace::is_reserved(key) {
                expired.push(crate::notify::Event {
                    class: crate::notify::EXPIRED,
                    name: "expired",
                    key: key.to_vec(),
                    writer: 0,
                });
            }
        });
        crate::notify::publish(&shared, &expired);
        if dropped > 0 {
            shared.stats.expired_keys.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        cursor = next;
        // Like Redis: keep going while more than a quarter of a step had
        // expired, otherwise rest.
        if dropped * 4 > STEP_KEYS {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(PAUSE) => {}
            _ = shutdown.changed() => return,
        }
    }
}
