//! TCP echo server on a multi-thread Tokio runtime: one task per connection
//! reads what arrives (up to 4 KiB) and writes it back until the peer
//! closes. Listens on 127.0.0.1 only, TCP_NODELAY on; runs until killed.
//!
//! Usage: spindle-peer-tokio-echo [--port P] [--workers N]   (7000, 2)
//!
//! The accept loop is a spawned task and the main thread only waits on its
//! JoinHandle, so that the runtime's N workers alone serve.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo(mut stream: TcpStream) {
    let mut buffer = [0u8; 4096];
    loop {
        let n = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stream.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

fn main() {
    let (port, workers) = spindle_peer_tokio_net::args("spindle-peer-tokio-echo");
    let rt = spindle_peer_tokio_net::runtime(workers);
    let server = rt.spawn(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            tokio::spawn(echo(stream));
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    });
    match rt.block_on(server) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("spindle-peer-tokio-echo: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("spindle-peer-tokio-echo: {e}");
            std::process::exit(1);
        }
    }
}
