//! hyper 0.14 HTTP/1.1 server (keep-alive) on a multi-thread Tokio runtime:
//! GET / answers 200 "Hello, World!\n" (text/plain), anything else 404.
//! Listens on 127.0.0.1 only, TCP_NODELAY on; runs until killed.
//!
//! Usage: spindle-peer-hyper [--port P] [--workers N]   (7000, 2)
//!
//! The server future (the accept loop) is spawned, so that the runtime's N
//! workers alone serve: the main thread only waits on its JoinHandle (block_on
//! of the server itself would poll the accept loop on a third thread).

use std::convert::Infallible;
use std::net::SocketAddr;

use hyper::service::{make_service_fn, service_fn};
use hyper::{header, Body, Method, Request, Response, Server, StatusCode};

async fn hello(req: Request<Body>) -> Result<Response<Body>, Infallible> {
    let response = if req.method() == Method::GET && req.uri().path() == "/" {
        Response::builder()
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from("Hello, World!\n"))
    } else {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())
    };
    Ok(response.expect("a valid response"))
}

fn main() {
    let (port, workers) = spindle_peer_tokio_net::args("spindle-peer-hyper");
    let rt = spindle_peer_tokio_net::runtime(workers);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let server = rt.spawn(async move {
        let make = make_service_fn(|_conn| async { Ok::<_, Infallible>(service_fn(hello)) });
        Server::try_bind(&addr)?
            .http1_only(true)
            .tcp_nodelay(true)
            .serve(make)
            .await
    });
    match rt.block_on(server) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("spindle-peer-hyper: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("spindle-peer-hyper: {e}");
            std::process::exit(1);
        }
    }
}
