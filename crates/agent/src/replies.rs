//! What a chat is told outside a turn's own stream — the dispatcher's and the workers'
//! replies: that the daemon is shutting down, how many messages a `/stop` dropped — and the
//! one way a reply to an inbound message is sent.

use std::sync::Arc;

use switchboard_core::{Bus, Fate, InboundMessage, OutboundKind, OutboundMessage, TurnEnd};

/// Sends `kind` to the chat `to` came from, answering it (a failure is logged).
pub(crate) async fn reply(hub: &Arc<dyn Bus>, to: &InboundMessage, kind: OutboundKind) {
    if let Err(err) = hub
        .publish_outbound(OutboundMessage::reply_to(to, kind))
        .await
    {
        tracing::warn!(channel = %to.channel, chat = %to.chat_id, error = %err,
            "could not deliver a reply");
    }
}

/// The replies to a message that arrived while the daemon stops, if it gets any: a
/// message its platform delivers again after the restart is left for then (and its channel
/// told so), one that would be lost gets "send it again".
pub(crate) fn shutting_down(message: &InboundMessage) -> Option<Vec<OutboundKind>> {
    if message.ack.is_some() {
        message.settle(Fate::Unprocessed);
        return None;
    }
    let text = "switchboard is shutting down; this message was not processed — send it again \
                in a moment.";
    Some(vec![
        OutboundKind::Error(text.into()),
        OutboundKind::Done(TurnEnd::NotATurn),
    ])
}

pub(crate) async fn refuse_shutting_down(hub: &Arc<dyn Bus>, message: &InboundMessage) {
    for kind in shutting_down(message).unwrap_or_default() {
        reply(hub, message, kind).await;
    }
}

/// What the chat is told of the messages a `/stop` dropped.
pub(crate) fn dropped_text(dropped: usize) -> String {
    if dropped == 1 {
        "Dropped 1 message that was waiting when you sent /stop.".to_owned()
    } else {
        format!("Dropped {dropped} messages that were waiting when you sent /stop.")
    }
}

/// Tells the chat how many of its messages a `/stop` dropped, when the `/stop` itself could
/// not be queued behind them (its queue was full) and so cannot say it.
pub(crate) async fn report_dropped(hub: &Arc<dyn Bus>, message: &InboundMessage, dropped: usize) {
    let text = dropped_text(dropped);
    let to = OutboundMessage {
        reply_to: None,
        ..OutboundMessage::reply_to(message, OutboundKind::Message(text))
    };
    for kind in [to.kind.clone(), OutboundKind::Done(TurnEnd::NotATurn)] {
        let outbound = OutboundMessage { kind, ..to.clone() };
        if let Err(err) = hub.publish_outbound(outbound).await {
            tracing::warn!(error = %err, "could not deliver a reply");
        }
    }
}
