//! [`WsConfig`]: limits and auth of the WebSocket channel.

use crate::auth::WsAuth;

/// The most `max_frame_bytes` may be: the WebSocket reader holds at most this much of a
/// client's frame per socket.
pub const MAX_FRAME_BYTES_LIMIT: usize = 1024 * 1024;

/// How the WebSocket channel behaves. The daemon fills it from `[channels.websocket]`.
#[derive(Clone, Debug)]
pub struct WsConfig {
    /// Who may connect.
    pub auth: WsAuth,
    /// The largest client frame (and message) the reader accepts, 1 to
    /// [`MAX_FRAME_BYTES_LIMIT`]. A larger one is refused as soon as its header announces
    /// its length: the client gets an error frame and the socket is closed (1009).
    pub max_frame_bytes: usize,
    /// Frames queued for one socket before it counts as too slow and is closed.
    pub send_queue: usize,
    /// Host names (besides loopback ones) a browser may use to reach the page and `/ws`
    /// when auth is off; see [`WsAuth::None`].
    pub allowed_hosts: Vec<String>,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            auth: WsAuth::None,
            max_frame_bytes: 64 * 1024,
            send_queue: 1024,
            allowed_hosts: Vec::new(),
        }
    }
}
