//! Target `websocket_frames`: the bytes a client sends on an exec or attach connection
//! upgraded to WebSocket (Kubernetes' `v5/v4/…channel.k8s.io` subprotocols) → the WebSocket
//! framing with the limits edgecore's streaming server sets (`tungstenite`, which axum's
//! WebSocket uses, with `max_message_size` =
//! `verge_edgecore::streaming::remotecommand::websocket::MAX_MESSAGE_BYTES`) → edgecore's
//! channel decoding (`decode_client_message`: the channel byte, or a channel digit and base64).
//!
//! Input layout: the first byte picks the subprotocol (binary or base64); the rest is the
//! connection's bytes after the upgrade, as a server reads them (client frames are masked).
//!
//! Properties: nothing panics; no message longer than `MAX_MESSAGE_BYTES` is ever delivered
//! (a longer one ends the connection), and a decoded payload is never longer than its
//! message.

use std::io::{self, Read, Write};

use bytes::Bytes;
use tungstenite::protocol::{Message, Role, WebSocket, WebSocketConfig};
use verge_edgecore::streaming::remotecommand::websocket::{
    MAX_MESSAGE_BYTES, decode_client_message,
};

/// The input as the server's end of the connection: reads take the bytes, writes are dropped.
struct Wire<'a> {
    input: &'a [u8],
}

impl Read for Wire<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Wire<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads every message of `data[1..]` under the subprotocol `data[0]` picks; see the module
/// docs.
pub fn check(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let protocol = if pick & 1 == 0 {
        "v5.channel.k8s.io"
    } else {
        "base64.channel.k8s.io"
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES));
    let mut socket = WebSocket::from_raw_socket(Wire { input: rest }, Role::Server, Some(config));
    // Each message takes at least a 2-byte frame header from the input.
    for _ in 0..=rest.len() / 2 {
        let raw = match socket.read() {
            Ok(Message::Binary(data)) => data,
            Ok(Message::Text(text)) => Bytes::copy_from_slice(text.as_str().as_bytes()),
            Ok(_) => continue,
            Err(_) => return,
        };
        assert!(
            raw.len() <= MAX_MESSAGE_BYTES,
            "a message of {} bytes",
            raw.len()
        );
        if let Some((_, payload)) = decode_client_message(Some(protocol), raw.clone()) {
            assert!(payload.len() <= raw.len());
        }
    }
}
