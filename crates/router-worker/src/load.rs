//! Loading a checkpoint: a site's (from the browser's cache when it is
//! there, else downloaded and kept), verified against the manifest beside
//! the weight load, or the user's file; and the storage figures.

use std::rc::Rc;

use bench::report::Provenance;
use router::{CacheBudget, LoadedHead, Precision, PrefixCache, Router, RouterAssets, RouterConfig};
use wire::desk::{Finished, JobTicket, Outcome};
use wire::{
    Concern, FromWorker, JobResult, LoadStage, Manifest, ManifestHead, ManifestModel, ModeInfo, ModelInfo, OfferedModel, Scoring, Source,
    StorageInfo, UntrainedReference,
};

use crate::{io, now_ms, post, wasm_memory_bytes, Loaded, RouterWorker};

/// The pool the page routes over, compiled in (it is configuration, not data
/// the user supplies).
const POOL_YAML: &[u8] = include_bytes!("../../../configs/pool.coderouterbench.yaml");
const POOL_NAME: &str = "configs/pool.coderouterbench.yaml";
const MANIFEST_URL: &str = "models/manifest.json";

/// A router built but not yet the loaded one, and where to keep its
/// descriptor vectors once it is (`None`: they came from there).
struct Prepared {
    router: Router,
    keep: Option<(web_sys::Cache, String)>,
}

impl RouterWorker {
    /// Loads a checkpoint the site's manifest lists. The router held
    /// before is dropped first, as the page assumes from the load's start
    /// (two at once may not fit, and a failed load leaves none).
    pub(crate) async fn load_bundled(&self, ticket: &JobTicket, on_request: Option<&str>, precision: Option<Precision>) -> Outcome {
        self.loaded.borrow_mut().take();
        self.load_stage(ticket, LoadStage::ReadingManifest, 0, None);
        // Started now, it is running by the time the bytes are in.
        let digest_helper = io::DigestHelper::spawn();
        let manifest = manifest().await?;
        let model = match on_request {
            None => manifest.bundled().cloned().ok_or_else(|| format!("{MANIFEST_URL}: lists no bundled model"))?,
            Some(file) => manifest
                .on_request(file)
                .cloned()
                .ok_or_else(|| format!("{file}: the site's manifest offers no such checkpoint on request; nothing was fetched"))?,
        };
        // The one URL the checkpoint is fetched, cached and deleted under.
        let url = io::site_url(&model.file);
        let cache = io::open_cache().await;
        let hit = match &cache {
            Ok(cache) => io::cached(cache, &url).await,
            Err(_) => None,
        };
        let source = if hit.is_some() { Source::Cached } else { Source::Downloaded };
        let started = now_ms();
        let response = match hit {
            Some(response) => response,
            None => io::fetch(&url).await.map_err(|e| {
                if model.on_request {
                    format!(
                        "{e}. {} is offered on request and this site does not serve it ({}); you can pick the file yourself below",
                        model.name, model.source
                    )
                } else {
                    e
                }
            })?,
        };
        let stage = if source == Source::Cached { LoadStage::ReadingCache } else { LoadStage::Downloading };
        let body = response.body().ok_or_else(|| format!("{}: the response has no body", model.file))?;
        let total = model.bytes;
        let (bytes, chunks) =
            io::read_stream(body, &model.file, total, &mut |done| self.load_stage(ticket, stage, done, Some(total))).await?;
        let read_ms = now_ms() - started;

        // Only a download has anything to store: a cached read lets its
        // chunks go before the weights are built.
        let chunks = (source == Source::Downloaded).then_some(chunks);
        // Verification overlaps the weight load: a helper worker digests the
        // bytes (`io::Sha256Job`) while the router is built under the
        // manifest's digest. The router is shown, and anything kept, only
        // once the bytes' own digest agrees; `verify_ms` is the wait left
        // after the build.
        self.load_stage(ticket, LoadStage::PreparingWhileVerifying, 0, None);
        let digest = io::Sha256Job::start(&bytes, digest_helper);
        let prepared = if bytes.len() as u64 == model.bytes {
            Some(self.prepare_router(ticket, &bytes, &model.file, &model.sha256, precision).await)
        } else {
            None
        };
        let started = now_ms();
        let sha256 = digest.finish().await?;
        let verify_ms = now_ms() - started;
        let prepared = match prepared {
            Some(prepared) if sha256 == model.sha256 => prepared?,
            _ => {
                if let Ok(cache) = &cache {
                    // A damaged cached copy must not be read again on the next visit.
                    let _ = wasm_bindgen_futures::JsFuture::from(cache.delete_with_str(&url)).await;
                }
                return Err(format!(
                    "{}: SHA-256 {sha256} ({} bytes) does not match the manifest's {} ({} bytes); the file was not loaded{}",
                    model.file,
                    bytes.len(),
                    model.sha256,
                    model.bytes,
                    if source == Source::Cached { " and the cached copy was deleted" } else { "" }
                ));
            }
        };
        if let (Some(chunks), Ok(cache)) = (&chunks, &cache) {
            // A full quota costs the next visit a download, not this load:
            // the model still loads, and the page is told why nothing was kept.
            if let Err(e) = io::store(cache, &url, chunks).await {
                post(&FromWorker::Problem {
                    during: Concern::Storage,
                    message: format!(
                        "{} was loaded but not kept in this browser's cache ({e}): the next visit downloads it again",
                        model.file
                    ),
                });
            }
        }
        drop(chunks);
        let info = ModelInfoParts { source, read_ms, verify_ms, sha256, sha256_checked: true };
        let model = self.install(ticket, prepared, Rc::new(bytes), &model.file, info, Some(&manifest)).await;
        // The storage figures follow on their own: awaited here, they would
        // keep the worker busy after the load ends, and a page that starts a
        // bench the moment it hears of the model (the latency widget) would
        // be told the worker is still loading.
        wasm_bindgen_futures::spawn_local(async { post(&FromWorker::Storage { storage: storage_info().await }) });
        Ok(Finished::complete(JobResult::Loaded(Box::new(model))))
    }

    /// Loads the user's file (the router held before is dropped first).
    pub(crate) async fn load_file(&self, ticket: &JobTicket, file: web_sys::File, name: &str, precision: Option<Precision>) -> Outcome {
        self.loaded.borrow_mut().take();
        let total = file.size() as u64;
        let started = now_ms();
        let (bytes, _) =
            io::read_stream(file.stream(), name, total, &mut |done| self.load_stage(ticket, LoadStage::ReadingFile, done, Some(total)))
                .await?;
        let read_ms = now_ms() - started;
        self.load_stage(ticket, LoadStage::HashingFile, 0, None);
        let started = now_ms();
        let sha256 = io::sha256_hex(&bytes).await?;
        let verify_ms = now_ms() - started;
        let info = ModelInfoParts { source: Source::UserFile, read_ms, verify_ms, sha256, sha256_checked: false };
        let prepared = self.prepare_router(ticket, &bytes, name, &info.sha256, precision).await?;
        let model = self.install(ticket, prepared, Rc::new(bytes), name, info, None).await;
        Ok(Finished::complete(JobResult::Loaded(Box::new(model))))
    }

    /// Builds a router from bytes whose digest is `sha256` (the old one must
    /// be dropped first: two routers at once may not fit). The candidates'
    /// descriptor vectors come from the browser's cache when an earlier load
    /// of the same file at the same precision kept them there (the router
    /// checks the settings they were encoded under), so a second visit skips
    /// encoding them.
    async fn prepare_router(
        &self,
        ticket: &JobTicket,
        bytes: &[u8],
        file_name: &str,
        sha256: &str,
        precision: Option<Precision>,
    ) -> Result<Prepared, String> {
        let precision = precision.unwrap_or(Precision::SERVED);
        let cache = io::open_cache().await.ok();
        // The revision too: vectors another build's kernels encoded are not
        // this build's, though every setting the router checks matches.
        let url = io::site_url(&format!("descriptor-cache/{sha256}.{}.{}.bin", precision.flag(), env!("WORKER_GIT_REVISION")));
        let cached = match &cache {
            Some(cache) => io::cached_bytes(cache, &url).await,
            None => None,
        };
        let mut on_stage =
            |stage, done: usize, total: usize| self.load_stage(ticket, LoadStage::Build(stage), done as u64, Some(total as u64));
        let router = build_router(bytes, file_name, sha256, precision, cached.as_deref(), &mut on_stage)?;
        let keep = if router.load_timings.descriptors_cached { None } else { cache.map(|cache| (cache, url)) };
        Ok(Prepared { router, keep })
    }

    /// Makes a prepared (and, for a site's checkpoint, verified) router the
    /// loaded one, with the trained head the site pins for it, keeps newly
    /// encoded descriptor vectors, and returns what the page shows of it.
    /// `manifest` is the one a site's load already read (a user's file
    /// reads it here, for the head).
    async fn install(
        &self,
        ticket: &JobTicket,
        prepared: Prepared,
        bytes: Rc<Vec<u8>>,
        file_name: &str,
        parts: ModelInfoParts,
        manifest: Option<&Manifest>,
    ) -> ModelInfo {
        let Prepared { mut router, keep } = prepared;
        if let Some((cache, url)) = keep {
            // Not keeping them only costs the next load the encoding.
            let _ = io::store_bytes(&cache, &url, &router.descriptor_cache()).await;
        }
        self.load_stage(ticket, LoadStage::ReadingHead, 0, None);
        let (scoring, head) = attach_site_head(&mut router, manifest).await;
        let mut info = model_info(&router, file_name, bytes.len() as u64, parts);
        info.scoring = wire::Deferred::encode(&scoring);
        *self.loaded.borrow_mut() = Some(Loaded {
            router,
            bytes,
            file_name: file_name.to_string(),
            info: info.clone(),
            calls: 0,
            prefix_cache: PrefixCache::new(CacheBudget::default()),
            head,
        });
        info
    }
}

/// Attaches the trained head the site's manifest pins for this router's
/// checkpoint (fetched, its SHA-256 checked against the pin, then checked
/// against the router as any head is). Without one, or when any of that
/// fails, the router scores by similarity and the answer says why, with
/// what that scoring was measured to be worth on the site's first backbone
/// that has a head.
async fn attach_site_head(router: &mut Router, read: Option<&Manifest>) -> (Scoring, Option<LoadedHead>) {
    let fetched;
    let manifest = match read {
        Some(manifest) => manifest,
        None => match manifest().await {
            Ok(manifest) => {
                fetched = manifest;
                &fetched
            }
            Err(reason) => return (Scoring::Untrained { reason, reference: None }, None),
        },
    };
    let backbone = router.backbone_checkpoint_id().to_string();
    let untrained = |reason: String| async {
        let reference = match manifest.heads.first() {
            Some(entry) => fetch_head(entry)
                .await
                .ok()
                .map(|head| Box::new(UntrainedReference { backbone: entry.backbone.clone(), evaluation: head.head.evaluation })),
            None => None,
        };
        (Scoring::Untrained { reason, reference }, None)
    };
    let Some(entry) = manifest.head_for(&backbone) else {
        return untrained(format!("the site serves no trained head for checkpoint {backbone}")).await;
    };
    let head = match fetch_head(entry).await {
        Ok(head) => head,
        Err(reason) => return untrained(reason).await,
    };
    if let Err(e) = router.attach_loaded_head(head.clone(), &entry.file) {
        return untrained(e.to_string()).await;
    }
    let scoring = Scoring::Trained {
        head_id: head.id.clone(),
        file: entry.file.clone(),
        trained_on: head.head.trained_on.clone(),
        evaluation: Box::new(head.head.evaluation.clone()),
    };
    (scoring, Some(head))
}

/// A head file the manifest lists, read only if its bytes are the pinned ones.
async fn fetch_head(entry: &ManifestHead) -> Result<LoadedHead, String> {
    let text = io::fetch_text(&io::site_url(&entry.file)).await?;
    let sha256 = io::sha256_hex(text.as_bytes()).await?;
    if sha256 != entry.sha256 {
        return Err(format!(
            "{}: SHA-256 {sha256} does not match the manifest's pinned {}; the head was not used",
            entry.file, entry.sha256
        ));
    }
    LoadedHead::from_json(text.as_bytes(), &entry.file).map_err(|e| e.to_string())
}

/// The parts of [`ModelInfo`] known before the router is built.
struct ModelInfoParts {
    source: Source,
    read_ms: f64,
    verify_ms: f64,
    sha256: String,
    sha256_checked: bool,
}

/// `sha256` is WebCrypto's digest of `bytes`, already computed: the router's
/// own (portable) SHA-256 would take seconds in wasm.
pub(crate) fn build_router(
    bytes: &[u8],
    file_name: &str,
    sha256: &str,
    precision: Precision,
    descriptors: Option<&[u8]>,
    on_stage: &mut dyn FnMut(router::BuildStage, usize, usize),
) -> Result<Router, String> {
    let assets = RouterAssets {
        gguf: bytes,
        gguf_name: file_name,
        gguf_sha256: Some(sha256),
        tokenizer_json: None,
        pool_yaml: POOL_YAML,
        pool_name: POOL_NAME,
    };
    Router::load_with_cache(&assets, RouterConfig { precision, ..RouterConfig::default() }, on_stage, descriptors)
        .map_err(|e| e.to_string())
}

fn model_info(router: &Router, file_name: &str, bytes: u64, parts: ModelInfoParts) -> ModelInfo {
    ModelInfo {
        provenance: Provenance::of(router, file_name),
        source: parts.source,
        bytes,
        sha256: parts.sha256,
        sha256_checked: parts.sha256_checked,
        read_ms: parts.read_ms,
        verify_ms: parts.verify_ms,
        load: router.load_timings,
        wasm_memory_bytes: wasm_memory_bytes(),
        flop_model: router.backbone.hparams.flop_model(),
        modes: router
            .pool
            .modes
            .iter()
            .map(|(name, m)| ModeInfo { name: name.clone(), cost_weight: m.cost_weight, description: m.description.clone() })
            .collect(),
        default_mode: router.pool.default_mode.clone(),
        candidates: router.pool.candidates.iter().map(|c| c.id.clone()).collect(),
        scoring: wire::Deferred::encode(&Scoring::default()),
    }
}

pub(crate) async fn storage_info() -> StorageInfo {
    let (usage_bytes, quota_bytes, mut note) = match io::storage_estimate().await {
        Ok((usage, quota)) => (Some(usage).filter(|v| v.is_finite()), Some(quota).filter(|v| v.is_finite()), String::new()),
        Err(e) => (None, None, e),
    };
    let manifest = manifest().await.unwrap_or(Manifest { models: Vec::new(), heads: Vec::new() });
    let cache = io::open_cache().await;
    if let Err(e) = &cache {
        note = e.clone();
    }
    let is_cached = |model: ManifestModel| {
        let cache = cache.as_ref().ok().cloned();
        async move {
            let cached = match cache {
                Some(cache) => io::cached(&cache, &io::site_url(&model.file)).await.is_some(),
                None => false,
            };
            OfferedModel { model, cached }
        }
    };
    let model_cached = match manifest.bundled() {
        Some(model) => is_cached(model.clone()).await.cached,
        None => false,
    };
    let mut on_request = Vec::new();
    for model in manifest.models.iter().filter(|m| m.on_request) {
        on_request.push(is_cached(model.clone()).await);
    }
    StorageInfo { usage_bytes, quota_bytes, model_cached, on_request, note }
}

/// The site's checkpoint list.
async fn manifest() -> Result<Manifest, String> {
    let text = io::fetch_text(&io::site_url(MANIFEST_URL)).await?;
    serde_json::from_str(&text).map_err(|e| format!("{MANIFEST_URL}: not a model manifest: {e}"))
}
