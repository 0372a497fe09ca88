//! A `PeerIpKey` that finds no peer address says so once, at error level, with the fix: every
//! such request would otherwise share one quota without a sign.
#![cfg(feature = "tower")]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use flowguard::gcra::layer::{KeyExtractor, NO_PEER_ADDRESS, PeerIpKey};

/// Records the level and message of every event.
#[derive(Default, Clone)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = String::new();
        event.record(&mut Message(&mut message));
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, message));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn a_request_without_a_peer_address_is_reported_once_per_extractor() {
    let events = Events::default();
    let _default = tracing::subscriber::set_default(events.clone());
    let key = PeerIpKey::new();
    let no_peer = http::Request::new(());
    let mut with_peer = http::Request::new(());
    with_peer
        .extensions_mut()
        .insert("192.0.2.7:50123".parse::<SocketAddr>().unwrap());

    assert!(key.key(&with_peer).is_some());
    assert!(
        events.0.lock().unwrap().is_empty(),
        "a peer: nothing to say"
    );
    for _ in 0..3 {
        assert!(key.key(&no_peer).is_none());
        // A clone is the same extractor (the layer clones it per connection).
        assert!(key.clone().key(&no_peer).is_none());
    }
    let seen = events.0.lock().unwrap().clone();
    assert_eq!(seen, [(tracing::Level::ERROR, NO_PEER_ADDRESS.to_owned())]);
    assert!(NO_PEER_ADDRESS.contains("into_make_service_with_connect_info"));

    // Another extractor (another layer) says it again.
    assert!(PeerIpKey::new().key(&no_peer).is_none());
    assert_eq!(events.0.lock().unwrap().len(), 2);
}
