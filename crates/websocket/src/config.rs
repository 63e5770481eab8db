//! [`WsConfig`]: limits and auth of the WebSocket channel.

use crate::auth::WsAuth;

/// How the WebSocket channel behaves. The daemon fills it from `[channels.websocket]`.
#[derive(Clone, Debug)]
pub struct WsConfig {
    /// Who may connect.
    pub auth: WsAuth,
    /// A text frame larger than this gets an `error` frame (the connection stays up).
    pub max_frame_bytes: usize,
    /// Frames queued for one socket before it counts as too slow and is closed.
    pub send_queue: usize,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            auth: WsAuth::None,
            max_frame_bytes: 64 * 1024,
            send_queue: 1024,
        }
    }
}
