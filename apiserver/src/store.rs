//! In-memory object storage with a global resourceVersion, a bounded event history and
//! watch fan-out (watchers read the shared history; a `tokio::sync::watch` channel wakes them).

use crate::util::meta_mut;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// (group, plural)
pub type Gr = (String, String);
/// (namespace or "", name)
pub type ObjKey = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub typ: EventType,
    pub gr: Gr,
    pub ns: String,
    pub object: Arc<Value>,
    /// The previous state for MODIFIED events.
    pub prev: Option<Arc<Value>>,
}

struct Inner {
    rv: u64,
    data: HashMap<Gr, BTreeMap<ObjKey, Arc<Value>>>,
    /// owner uid -> dependents (ownerReferences index for garbage collection)
    owners: HashMap<String, std::collections::HashSet<(Gr, ObjKey)>>,
    history: VecDeque<Arc<Event>>,
    cap: usize,
}

/// Called after every write, outside the store's lock: (store, resource, namespace, name).
pub type AfterWrite = fn(&Store, &Gr, &str, &str);

pub struct Store {
    inner: Mutex<Inner>,
    notify: tokio::sync::watch::Sender<u64>,
    after_write: Option<AfterWrite>,
}

/// The object already exists.
#[derive(Debug)]
pub struct AlreadyExists;

/// Outcome of a compare-and-swap write.
pub enum Cas {
    Ok(Arc<Value>),
    /// The stored resourceVersion is not the expected one (or the object is gone).
    Stale,
}

impl Store {
    pub fn new(history: usize) -> Self {
        let (tx, _) = tokio::sync::watch::channel(1);
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                data: HashMap::new(),
                owners: HashMap::new(),
                history: VecDeque::new(),
                cap: history.max(1),
            }),
            notify: tx,
            after_write: None,
        }
    }

    /// The store with `hook` called after every write (the server keeps the core/v1 view of
    /// `events.k8s.io` Events with it).
    pub fn after_write(mut self, hook: AfterWrite) -> Self {
        self.after_write = Some(hook);
        self
    }

    fn written(&self, gr: &Gr, ns: &str, name: &str) {
        if let Some(hook) = self.after_write {
            hook(self, gr, ns, name);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.notify.subscribe()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, gr: &Gr, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .data
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Snapshot of all objects of a resource (optionally one namespace), sorted by (ns, name),
    /// together with the current resourceVersion.
    pub fn list(&self, gr: &Gr, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let g = self.lock();
        let items = match g.data.get(gr) {
            None => vec![],
            Some(m) => match ns {
                None => m.values().cloned().collect(),
                Some(ns) => m
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (items, g.rv)
    }

    /// Whether no object of any resource lives in a namespace.
    pub fn namespace_is_empty(&self, ns: &str) -> bool {
        let g = self.lock();
        g.data.values().all(|m| {
            m.range((ns.to_string(), String::new())..)
                .next()
                .is_none_or(|((n, _), _)| n != ns)
        })
    }

    /// All resource keys that have objects in a namespace.
    pub fn resources_in_namespace(&self, ns: &str) -> Vec<Gr> {
        let g = self.lock();
        g.data
            .iter()
            .filter(|(_, m)| {
                m.range((ns.to_string(), String::new())..)
                    .next()
                    .is_some_and(|((n, _), _)| n == ns)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Objects whose `metadata.ownerReferences` name `owner_uid` (in `ns`, or anywhere if None).
    pub fn dependents(&self, owner_uid: &str, ns: Option<&str>) -> Vec<(Gr, Arc<Value>)> {
        let g = self.lock();
        let Some(deps) = g.owners.get(owner_uid) else {
            return vec![];
        };
        deps.iter()
            .filter(|(_, (dns, _))| ns.is_none_or(|n| n == dns))
            .filter_map(|(gr, key)| Some((gr.clone(), g.data.get(gr)?.get(key)?.clone())))
            .collect()
    }

    fn owner_uids(obj: &Value) -> Vec<String> {
        obj.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Keeps the ownerReferences index in sync with a write.
    fn index(g: &mut Inner, gr: &Gr, key: &ObjKey, old: Option<&Value>, new: Option<&Value>) {
        for uid in old.map(Self::owner_uids).unwrap_or_default() {
            if let Some(set) = g.owners.get_mut(&uid) {
                set.remove(&(gr.clone(), key.clone()));
                if set.is_empty() {
                    g.owners.remove(&uid);
                }
            }
        }
        for uid in new.map(Self::owner_uids).unwrap_or_default() {
            g.owners.entry(uid).or_default().insert((gr.clone(), key.clone()));
        }
    }

    fn push(g: &mut Inner, ev: Event) -> Arc<Event> {
        let ev = Arc::new(ev);
        g.history.push_back(ev.clone());
        while g.history.len() > g.cap {
            g.history.pop_front();
        }
        ev
    }

    fn stamp(obj: &mut Value, rv: u64) {
        if let Some(m) = meta_mut(obj) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
    }

    /// Inserts a new object; `Err(AlreadyExists)` if it exists.
    pub fn create(&self, gr: &Gr, ns: &str, name: &str, mut obj: Value) -> Result<Arc<Value>, AlreadyExists> {
        let rv;
        let out;
        {
            let mut g = self.lock();
            let key = (ns.to_string(), name.to_string());
            if g.data.get(gr).is_some_and(|m| m.contains_key(&key)) {
                return Err(AlreadyExists);
            }
            g.rv += 1;
            rv = g.rv;
            Self::stamp(&mut obj, rv);
            out = Arc::new(obj);
            Self::index(&mut g, gr, &key, None, Some(&out));
            g.data.entry(gr.clone()).or_default().insert(key, out.clone());
            Self::push(
                &mut g,
                Event {
                    rv,
                    typ: EventType::Added,
                    gr: gr.clone(),
                    ns: ns.to_string(),
                    object: out.clone(),
                    prev: None,
                },
            );
        }
        self.notify.send_replace(rv);
        self.written(gr, ns, name);
        Ok(out)
    }

    /// Replaces an object if its stored resourceVersion equals `expected_rv`.
    pub fn replace(&self, gr: &Gr, ns: &str, name: &str, expected_rv: u64, mut obj: Value) -> Cas {
        let rv;
        let out;
        {
            let mut g = self.lock();
            let key = (ns.to_string(), name.to_string());
            let prev = match g.data.get(gr).and_then(|m| m.get(&key)) {
                Some(c) if crate::util::rv_of(c) == expected_rv => c.clone(),
                _ => return Cas::Stale,
            };
            g.rv += 1;
            rv = g.rv;
            Self::stamp(&mut obj, rv);
            out = Arc::new(obj);
            Self::index(&mut g, gr, &key, Some(&prev), Some(&out));
            g.data.entry(gr.clone()).or_default().insert(key, out.clone());
            Self::push(
                &mut g,
                Event {
                    rv,
                    typ: EventType::Modified,
                    gr: gr.clone(),
                    ns: ns.to_string(),
                    object: out.clone(),
                    prev: Some(prev),
                },
            );
        }
        self.notify.send_replace(rv);
        self.written(gr, ns, name);
        Cas::Ok(out)
    }

    /// Removes an object if its resourceVersion equals `expected_rv` (0 = any).
    pub fn remove(&self, gr: &Gr, ns: &str, name: &str, expected_rv: u64) -> Cas {
        let rv;
        let out;
        {
            let mut g = self.lock();
            let key = (ns.to_string(), name.to_string());
            let Some(m) = g.data.get_mut(gr) else {
                return Cas::Stale;
            };
            match m.get(&key) {
                Some(c) if expected_rv == 0 || crate::util::rv_of(c) == expected_rv => {}
                _ => return Cas::Stale,
            }
            let Some(old) = m.remove(&key) else {
                return Cas::Stale;
            };
            Self::index(&mut g, gr, &key, Some(&old), None);
            g.rv += 1;
            rv = g.rv;
            let mut obj = (*old).clone();
            Self::stamp(&mut obj, rv);
            out = Arc::new(obj);
            Self::push(
                &mut g,
                Event {
                    rv,
                    typ: EventType::Deleted,
                    gr: gr.clone(),
                    ns: ns.to_string(),
                    object: out.clone(),
                    prev: None,
                },
            );
        }
        self.notify.send_replace(rv);
        self.written(gr, ns, name);
        Cas::Ok(out)
    }

    /// Drops the whole event history (an etcd compaction at the current revision): resuming from any
    /// earlier resourceVersion is then 410 Gone.
    pub fn compact(&self) {
        self.lock().history.clear();
    }

    /// Events with rv > `since`. `Err(oldest_available)` if the history no longer covers `since`.
    pub fn events_since(&self, since: u64, max: usize) -> Result<Vec<Arc<Event>>, u64> {
        let g = self.lock();
        let oldest = g.history.front().map(|e| e.rv).unwrap_or(g.rv + 1);
        // Everything after `since` must still be present: since+1 >= oldest, or nothing happened.
        if since < g.rv && since + 1 < oldest {
            return Err(oldest);
        }
        let start = g.history.partition_point(|e| e.rv <= since);
        Ok(g.history.range(start..).take(max).cloned().collect())
    }
}
