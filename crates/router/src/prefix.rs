//! Prefix reuse: a radix tree of token sequences whose nodes hold the K/V
//! state of their tokens (the field guide's note 04, "reuse prefixes, not
//! answers").
//!
//! A node's edge is a run of tokens and a [`SegmentView`] of their state.
//! [`PrefixCache::lookup`] walks the longest held prefix of a sequence
//! (ending inside an edge uses the first part of that edge's view) and pins
//! the nodes it used; the caller prefills only the rest and hands the new
//! segment to [`PrefixCache::insert`], which splits an edge where the new
//! sequence leaves it (two views of one segment: nothing is copied), adds the
//! new tokens as a leaf, unpins, and evicts least-recently-used unpinned
//! leaves until the cache is within its budget of tokens and bytes.
//!
//! States are only compatible under the same weights, tokenizer and
//! truncation window (the note's compatibility rule), so every tree lives
//! under a [`Namespace`] of checkpoint id, precision, tokenizer id and
//! `router_max_tokens`; a lookup never crosses namespaces.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::segment::{KvState, Segment, SegmentView};

/// What a cache may hold at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheBudget {
    /// Tokens held across every namespace.
    pub max_tokens: usize,
    /// Bytes of the segments held (keys, values and final hidden states).
    pub max_bytes: u64,
}

impl Default for CacheBudget {
    /// 8,192 tokens and 512 MiB: eight full 1,024-token conversations of
    /// the bundled 135M backbone (46 KB of f32 K/V and hidden state per
    /// token), well inside wasm32's 4 GiB.
    fn default() -> Self {
        CacheBudget { max_tokens: 8192, max_bytes: 512 << 20 }
    }
}

/// States are reusable only under the same weights computed the same way,
/// the same tokenizer and the same window.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Namespace {
    pub checkpoint_id: String,
    /// How the weights are computed with: the same checkpoint gives other
    /// keys and values under each.
    pub precision: crate::Precision,
    pub tokenizer_id: String,
    pub max_tokens: usize,
}

/// Running totals since the cache was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    pub lookups: u64,
    /// Tokens lookups found held.
    pub reused_tokens: u64,
    /// Tokens inserted after a prefill.
    pub inserted_tokens: u64,
    /// Leaves evicted, and the tokens they held.
    pub evictions: u64,
    pub evicted_tokens: u64,
}

type NodeId = usize;

#[derive(Debug)]
struct Node {
    parent: Option<NodeId>,
    /// The edge's tokens (empty at a root).
    tokens: Vec<u32>,
    /// Their state; `None` at a root.
    view: Option<SegmentView>,
    /// Children by the first token of their edge.
    children: BTreeMap<u32, NodeId>,
    last_used: u64,
    /// Lookups in flight that use this node; a pinned node is never evicted.
    pins: u32,
}

/// The longest held prefix of a sequence, pinned until it is handed back to
/// [`PrefixCache::insert`] or [`PrefixCache::release`].
#[derive(Debug)]
#[must_use = "a lookup pins cache nodes until it is inserted or released"]
pub struct Lookup {
    namespace: Namespace,
    /// The held state of the first `matched` tokens.
    pub state: KvState,
    pub matched: usize,
    /// Nodes pinned, root first; the last may be used only in part.
    path: Vec<NodeId>,
}

/// A radix tree per namespace, one budget and one LRU clock across them.
#[derive(Debug, Default)]
pub struct PrefixCache {
    budget: CacheBudget,
    roots: BTreeMap<Namespace, NodeId>,
    nodes: Vec<Option<Node>>,
    free: Vec<NodeId>,
    clock: u64,
    stats: CacheStats,
}

impl PrefixCache {
    pub fn new(budget: CacheBudget) -> PrefixCache {
        PrefixCache { budget, ..PrefixCache::default() }
    }

    pub fn budget(&self) -> CacheBudget {
        self.budget
    }

    /// A new budget; evicts at once what no longer fits.
    pub fn set_budget(&mut self, budget: CacheBudget) {
        self.budget = budget;
        self.evict();
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Drops every tree (pinned nodes' states stay alive in their lookups).
    pub fn clear(&mut self) {
        let budget = self.budget;
        let stats = self.stats;
        *self = PrefixCache { budget, stats, ..PrefixCache::default() };
    }

    fn node(&self, id: NodeId) -> &Node {
        self.nodes[id].as_ref().expect("a live node")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes[id].as_mut().expect("a live node")
    }

    fn add(&mut self, node: Node) -> NodeId {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        }
    }

    fn root(&mut self, namespace: &Namespace) -> NodeId {
        if let Some(&id) = self.roots.get(namespace) {
            return id;
        }
        let id = self.add(Node { parent: None, tokens: Vec::new(), view: None, children: BTreeMap::new(), last_used: 0, pins: 0 });
        self.roots.insert(namespace.clone(), id);
        id
    }

    /// Tokens held: the sum of every edge.
    pub fn tokens_held(&self) -> usize {
        self.nodes.iter().flatten().map(|n| n.tokens.len()).sum()
    }

    /// Bytes held: every distinct segment a node still refers to, whole
    /// (two views of one split segment keep all of it alive).
    pub fn bytes_held(&self) -> u64 {
        let mut seen = HashSet::new();
        self.nodes
            .iter()
            .flatten()
            .filter_map(|n| n.view.as_ref())
            .filter(|v| seen.insert(Arc::as_ptr(&v.segment)))
            .map(|v| v.segment.bytes())
            .sum()
    }

    /// The longest held prefix of `ids` in `namespace`, with its state;
    /// pins the nodes it uses and marks them used.
    pub fn lookup(&mut self, namespace: &Namespace, ids: &[u32]) -> Lookup {
        self.stats.lookups += 1;
        self.clock += 1;
        let clock = self.clock;
        let mut at = self.root(namespace);
        let mut state = KvState::default();
        let mut path = vec![at];
        let mut matched = 0;
        while matched < ids.len() {
            let Some(&child) = self.node(at).children.get(&ids[matched]) else { break };
            let node = self.node(child);
            let common = node.tokens.iter().zip(&ids[matched..]).take_while(|(a, b)| a == b).count();
            state.push(node.view.as_ref().expect("non-root nodes hold state").head(common));
            matched += common;
            path.push(child);
            if common < node.tokens.len() {
                break;
            }
            at = child;
        }
        for &id in &path {
            let node = self.node_mut(id);
            node.pins += 1;
            node.last_used = clock;
        }
        self.stats.reused_tokens += matched as u64;
        Lookup { namespace: namespace.clone(), state, matched, path }
    }

    /// Unpins a lookup's nodes without adding anything (a failed prefill).
    pub fn release(&mut self, lookup: Lookup) {
        self.unpin(&lookup.path);
    }

    fn unpin(&mut self, path: &[NodeId]) {
        for &id in path {
            // A node may have been dropped by `clear` meanwhile.
            if let Some(Some(node)) = self.nodes.get_mut(id) {
                node.pins = node.pins.saturating_sub(1);
            }
        }
    }

    /// Adds `ids[lookup.matched..]`, whose state `segment` holds (a
    /// prefill's output for exactly those tokens), after the lookup's
    /// prefix; unpins the lookup and evicts to the budget.
    ///
    /// The attach point is found by walking `ids[..matched]` again, so a
    /// tree changed since the lookup (another insert split an edge, `clear`
    /// ran) is handled: if the prefix is no longer held whole, or another
    /// insert already holds the new tokens' first one there, the segment is
    /// not added (the caller's decision stands; only the reuse is lost).
    pub fn insert(&mut self, ids: &[u32], lookup: Lookup, segment: Arc<Segment>) {
        let Lookup { namespace, matched, path, .. } = lookup;
        assert_eq!(segment.tokens(), ids.len() - matched, "a segment for the tokens after the held prefix");
        if segment.tokens() > 0 {
            if let Some(parent) = self.attach_point(&namespace, &ids[..matched]) {
                let first = ids[matched];
                if !self.node(parent).children.contains_key(&first) {
                    let leaf = self.add(Node {
                        parent: Some(parent),
                        tokens: ids[matched..].to_vec(),
                        view: Some(SegmentView::whole(segment)),
                        children: BTreeMap::new(),
                        last_used: self.clock,
                        pins: 0,
                    });
                    self.node_mut(parent).children.insert(first, leaf);
                    self.stats.inserted_tokens += (ids.len() - matched) as u64;
                }
            }
        }
        self.unpin(&path);
        self.evict();
    }

    /// The node whose path spells exactly `prefix`, splitting an edge that
    /// runs past its end; `None` if the tree no longer holds `prefix`.
    fn attach_point(&mut self, namespace: &Namespace, prefix: &[u32]) -> Option<NodeId> {
        let mut at = self.root(namespace);
        let mut pos = 0;
        while pos < prefix.len() {
            let child = *self.node(at).children.get(&prefix[pos])?;
            let edge = &self.node(child).tokens;
            let common = edge.iter().zip(&prefix[pos..]).take_while(|(a, b)| a == b).count();
            if common == edge.len() {
                at = child;
                pos += common;
            } else if pos + common == prefix.len() {
                return Some(self.split(child, common));
            } else {
                return None;
            }
        }
        Some(at)
    }

    /// Splits `id`'s edge after `keep` tokens (0 < keep < edge length):
    /// `id` keeps the first part and its place under its parent, and a new
    /// child takes the rest with `id`'s children. The two parts are views of
    /// the same segment: nothing is copied. Returns `id`.
    fn split(&mut self, id: NodeId, keep: usize) -> NodeId {
        let node = self.node_mut(id);
        let rest_tokens = node.tokens.split_off(keep);
        let view = node.view.clone().expect("non-root nodes hold state");
        node.view = Some(view.head(keep));
        let children = std::mem::take(&mut node.children);
        let last_used = node.last_used;
        let first = rest_tokens[0];
        let rest = self.add(Node { parent: Some(id), tokens: rest_tokens, view: Some(view.tail(keep)), children, last_used, pins: 0 });
        let moved: Vec<NodeId> = self.node(rest).children.values().copied().collect();
        for child in moved {
            self.node_mut(child).parent = Some(rest);
        }
        self.node_mut(id).children.insert(first, rest);
        id
    }

    fn over_budget(&self) -> bool {
        self.tokens_held() > self.budget.max_tokens || self.bytes_held() > self.budget.max_bytes
    }

    /// Evicts least-recently-used unpinned leaves until within budget.
    fn evict(&mut self) {
        while self.over_budget() {
            let victim = self
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
                .filter(|(_, n)| n.parent.is_some() && n.children.is_empty() && n.pins == 0)
                .min_by_key(|(id, n)| (n.last_used, *id))
                .map(|(id, _)| id);
            let Some(victim) = victim else { return };
            let node = self.nodes[victim].take().expect("a live node");
            self.free.push(victim);
            self.stats.evictions += 1;
            self.stats.evicted_tokens += node.tokens.len() as u64;
            let parent = node.parent.expect("a leaf has a parent");
            self.node_mut(parent).children.remove(&node.tokens[0]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::KvLayout;

    const LAYOUT: KvLayout = KvLayout { layers: 1, kv_heads: 1, head_dim: 8, hidden: 4, taps: 0 };

    /// A segment whose hidden state row `i` is `[first_token + i; 4]`, so a
    /// view's rows show which tokens they hold.
    fn segment(first: u32, tokens: usize) -> Arc<Segment> {
        let mut s = Segment::zeroed(LAYOUT, tokens);
        for (i, row) in s.hidden_mut().chunks_exact_mut(4).enumerate() {
            row.fill((first as usize + i) as f32);
        }
        Arc::new(s)
    }

    fn ns(name: &str) -> Namespace {
        Namespace { checkpoint_id: name.into(), precision: crate::Precision::DequantizedF32, tokenizer_id: "gguf".into(), max_tokens: 1024 }
    }

    /// Looks `ids` up and inserts the rest as a segment whose hidden rows
    /// are the token values; returns the tokens reused.
    fn decide(cache: &mut PrefixCache, namespace: &Namespace, ids: &[u32]) -> usize {
        let lookup = cache.lookup(namespace, ids);
        let matched = lookup.matched;
        // The held state's hidden rows are the tokens it claims to hold.
        let held: Vec<f32> =
            lookup.state.views().iter().flat_map(|v| v.segment.hidden(v.rows.clone()).iter().step_by(4).copied()).collect();
        assert_eq!(held, ids[..matched].iter().map(|&t| t as f32).collect::<Vec<_>>());
        if matched == ids.len() {
            cache.release(lookup);
        } else {
            cache.insert(ids, lookup, segment(ids[matched], ids.len() - matched));
        }
        matched
    }

    fn run(from: u32, len: u32) -> Vec<u32> {
        (from..from + len).collect()
    }

    #[test]
    fn a_diverging_sequence_splits_an_edge_into_two_views_of_one_segment() {
        let mut cache = PrefixCache::new(CacheBudget::default());
        let a = run(0, 10);
        let mut b = run(0, 6);
        b.extend([100, 101, 102]);
        assert_eq!(decide(&mut cache, &ns("m"), &a), 0);
        assert_eq!(decide(&mut cache, &ns("m"), &b), 6);
        assert_eq!(cache.tokens_held(), 13);
        // a's segment (10 tokens) is held once although two nodes view it.
        assert_eq!(cache.bytes_held(), 13 * LAYOUT.bytes_per_token());
        assert_eq!(decide(&mut cache, &ns("m"), &a), 10, "a is still held whole after the split");
        assert_eq!(decide(&mut cache, &ns("m"), &b), 9);
        // Extending a reuses all of it.
        let mut longer = a.clone();
        longer.extend([7, 7, 7]);
        assert_eq!(decide(&mut cache, &ns("m"), &longer), 10);
        assert_eq!(cache.stats().lookups, 5);
    }

    #[test]
    fn namespaces_never_share_state() {
        let mut cache = PrefixCache::new(CacheBudget::default());
        decide(&mut cache, &ns("one"), &run(0, 8));
        assert_eq!(decide(&mut cache, &ns("two"), &run(0, 8)), 0);
        let other_window = Namespace { max_tokens: 512, ..ns("one") };
        assert_eq!(decide(&mut cache, &other_window, &run(0, 8)), 0);
        let other_precision = Namespace { precision: crate::Precision::Quantized, ..ns("one") };
        assert_eq!(decide(&mut cache, &other_precision, &run(0, 8)), 0);
        assert_eq!(decide(&mut cache, &ns("one"), &run(0, 8)), 8);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_leaves_and_spares_pinned_ones() {
        let mut cache = PrefixCache::new(CacheBudget { max_tokens: 25, max_bytes: u64::MAX });
        decide(&mut cache, &ns("m"), &run(0, 10));
        decide(&mut cache, &ns("m"), &run(100, 10));
        decide(&mut cache, &ns("m"), &run(0, 10)); // touches the first
        decide(&mut cache, &ns("m"), &run(200, 10)); // 30 > 25: evicts the 100s
        assert_eq!(cache.tokens_held(), 20);
        assert_eq!(cache.stats().evictions, 1);
        assert_eq!(decide(&mut cache, &ns("m"), &run(0, 10)), 10);
        assert_eq!(decide(&mut cache, &ns("m"), &run(100, 10)), 0, "evicted");

        // A lookup in flight pins its nodes through any pressure.
        let mut cache = PrefixCache::new(CacheBudget { max_tokens: 10, max_bytes: u64::MAX });
        decide(&mut cache, &ns("m"), &run(0, 10));
        let pinned = cache.lookup(&ns("m"), &run(0, 10));
        cache.set_budget(CacheBudget { max_tokens: 0, max_bytes: 0 });
        assert_eq!(cache.tokens_held(), 10, "pinned nodes stay");
        cache.release(pinned);
        cache.set_budget(CacheBudget { max_tokens: 0, max_bytes: 0 });
        assert_eq!(cache.tokens_held(), 0);
    }

    #[test]
    fn a_byte_budget_evicts_by_the_segments_really_held() {
        let per_token = LAYOUT.bytes_per_token();
        let mut cache = PrefixCache::new(CacheBudget { max_tokens: usize::MAX, max_bytes: 15 * per_token });
        decide(&mut cache, &ns("m"), &run(0, 10));
        decide(&mut cache, &ns("m"), &run(100, 10));
        assert_eq!(cache.bytes_held(), 10 * per_token);
        assert_eq!(decide(&mut cache, &ns("m"), &run(0, 10)), 0, "the older one went");
    }

    #[test]
    fn clear_during_a_lookup_loses_only_the_reuse() {
        let mut cache = PrefixCache::new(CacheBudget::default());
        decide(&mut cache, &ns("m"), &run(0, 10));
        let ids = run(0, 12);
        let lookup = cache.lookup(&ns("m"), &ids);
        assert_eq!(lookup.matched, 10);
        cache.clear();
        cache.insert(&ids, lookup, segment(10, 2));
        assert_eq!(cache.tokens_held(), 0, "nothing hangs from a prefix the cache no longer holds");
        assert_eq!(decide(&mut cache, &ns("m"), &ids), 0);
    }
}
