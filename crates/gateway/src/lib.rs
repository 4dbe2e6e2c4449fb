//! The third timing boundary: the whole request at the client.
//!
//! Two halves, on a kept HTTP stack. [`server`] is an OpenAI-compatible
//! streaming endpoint (axum on tokio) over the same engine and scheduler
//! the serving study steps ([`engine`]: one thread owns the router and an
//! open `serving::generation::GenServer`); with routing on, `model: "auto"`
//! runs `Router.decide` first and says what it chose and how long deciding
//! took. [`client`] is the load generator (reqwest, streaming): it replays
//! the serving run's trace, open-loop, against any OpenAI-compatible
//! endpoint (this one, llama.cpp's server, vLLM, SGLang) and measures at
//! the client; `bench::client_run` holds what it writes and note 06's
//! decomposition check.
//!
//! A shell like `bench-cli`: the pure cores (`router`, `serving`, `bench`)
//! know nothing of HTTP; this crate is where sockets and threads are.

pub mod client;
pub mod engine;
pub mod openai;
pub mod server;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use router::Router;

use crate::engine::{EngineConfig, EngineHandle};
use crate::openai::Defaults;
use crate::server::AppState;

/// How the endpoint listens and what it refuses.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    pub addr: SocketAddr,
    /// Bodies past this many bytes are refused with a 413.
    pub body_limit: usize,
    pub api_key: Option<String>,
    pub defaults: Defaults,
}

/// A listening endpoint: its address, its engine's handle, and the task serving it.
pub struct Endpoint {
    pub addr: SocketAddr,
    pub engine: EngineHandle,
    pub serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Starts the engine thread over `router` and serves the API on
/// `options.addr` (port 0: any free port; [`Endpoint::addr`] says which)
/// in a task of the current tokio runtime.
pub async fn listen(router: Router, config: EngineConfig, options: ListenOptions) -> std::io::Result<Endpoint> {
    let listener = tokio::net::TcpListener::bind(options.addr).await?;
    let addr = listener.local_addr()?;
    let routing = config.routing.is_some();
    let model_id = config.model_id.clone();
    let (engine, _thread) = engine::start(router, config);
    let state = Arc::new(AppState {
        engine: engine.clone(),
        model_id,
        routing,
        api_key: options.api_key,
        defaults: options.defaults,
        next_id: AtomicU64::new(0),
    });
    let app = server::app(state, options.body_limit);
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(Endpoint { addr, engine, serving })
}
