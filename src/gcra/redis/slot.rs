//! Redis Cluster key slots (CRC16/XMODEM of the key or its hash tag, mod 16384) and the map of
//! which master serves them ([`SlotMap`], read from `CLUSTER SLOTS`), so that a master in trouble
//! only opens the circuit for the slots it serves.

use ::redis::Value;

/// Slots in a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC16: [u16; 256] = crc16_table();

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The slot Redis Cluster routes `key` to: the first non-empty `{...}` if any, else the whole key.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// A cluster node, as `CLUSTER SLOTS` names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Node {
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// Consecutive slots served by one master.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OwnedRange {
    start: u16,
    end: u16,
    master: Node,
    replicas: Vec<Node>,
}

/// Which master serves each slot, as one node reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// Sorted by `start`, not overlapping.
    ranges: Vec<OwnedRange>,
}

impl SlotMap {
    /// Parses a `CLUSTER SLOTS` reply from the node at `queried_host` (which stands for nodes that
    /// report an empty host). `None` if the reply is not a slot table.
    pub(crate) fn parse(reply: &Value, queried_host: &str) -> Option<SlotMap> {
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else {
                return None;
            };
            let (start, end) = match fields.as_slice() {
                [Value::Int(start), Value::Int(end), ..] => {
                    (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?)
                }
                _ => return None,
            };
            if start > end || end >= SLOTS {
                return None;
            }
            let mut nodes = fields[2..].iter().map(|n| parse_node(n, queried_host));
            let master = nodes.next()??;
            let replicas = nodes.collect::<Option<Vec<Node>>>()?;
            ranges.push(OwnedRange {
                start,
                end,
                master,
                replicas,
            });
        }
        ranges.sort_by_key(|r| r.start);
        if ranges.windows(2).any(|w| w[0].end >= w[1].start) {
            return None;
        }
        Some(SlotMap { ranges })
    }

    /// The master serving `slot`, if any does.
    pub(crate) fn master_of(&self, slot: u16) -> Option<&Node> {
        let i = self.ranges.partition_point(|r| r.end < slot);
        self.ranges
            .get(i)
            .filter(|r| r.start <= slot)
            .map(|r| &r.master)
    }

    /// Whether both maps give every slot the same master (replicas aside).
    pub(crate) fn same_masters(&self, other: &SlotMap) -> bool {
        self.ranges.len() == other.ranges.len()
            && self
                .ranges
                .iter()
                .zip(&other.ranges)
                .all(|(a, b)| (a.start, a.end, &a.master) == (b.start, b.end, &b.master))
    }

    /// Every node in the map, masters first, each once.
    pub(crate) fn nodes(&self) -> Vec<Node> {
        let mut nodes: Vec<Node> = Vec::new();
        let masters = self.ranges.iter().map(|r| &r.master);
        let replicas = self.ranges.iter().flat_map(|r| &r.replicas);
        for node in masters.chain(replicas) {
            if !nodes.contains(node) {
                nodes.push(node.clone());
            }
        }
        nodes
    }

    /// For every slot, the group it belongs to: the lowest slot its master serves (or, for slots
    /// no master serves, the lowest such slot). Slots of one master share a group; no group holds
    /// slots of two masters.
    pub(crate) fn groups(&self) -> Vec<u16> {
        let mut lowest: Vec<(&Node, u16)> = Vec::new();
        for r in &self.ranges {
            if !lowest.iter().any(|(m, _)| *m == &r.master) {
                lowest.push((&r.master, r.start));
            }
        }
        let unserved = (0..SLOTS).find(|&s| self.master_of(s).is_none());
        (0..SLOTS)
            .map(|s| match self.master_of(s) {
                Some(m) => lowest
                    .iter()
                    .find(|(n, _)| *n == m)
                    .map_or(s, |&(_, first)| first),
                None => unserved.unwrap_or(s),
            })
            .collect()
    }
}

fn parse_node(value: &Value, queried_host: &str) -> Option<Node> {
    let Value::Array(fields) = value else {
        return None;
    };
    let host = match fields.first()? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
        Value::SimpleString(s) => s.clone(),
        Value::Nil => String::new(),
        _ => return None,
    };
    let port = match fields.get(1)? {
        Value::Int(p) => u16::try_from(*p).ok()?,
        _ => return None,
    };
    // Redis reports "" (or "?") for a node whose address it does not know better than the client.
    let host = if host.is_empty() || host == "?" {
        queried_host.to_string()
    } else {
        host
    };
    Some(Node { host, port })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two masters on 127.0.0.1, 7000 serving slots 0-8191 and 7001 slots 8192-16383: the map
    /// the grouping tests of the store decide against.
    pub(crate) fn two_masters() -> SlotMap {
        let reply = Value::Array(vec![
            range(0, 8191, vec![node("127.0.0.1", 7000)]),
            range(8192, 16383, vec![node("127.0.0.1", 7001)]),
        ]);
        SlotMap::parse(&reply, "127.0.0.1").unwrap()
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(start: i64, end: i64, nodes: Vec<Value>) -> Value {
        let mut fields = vec![Value::Int(start), Value::Int(end)];
        fields.extend(nodes);
        Value::Array(fields)
    }

    /// Three masters as `redis-cli --cluster create` splits them, the second serving two ranges.
    fn three_masters() -> Value {
        Value::Array(vec![
            range(
                10923,
                16383,
                vec![node("10.0.0.3", 7002), node("10.0.0.6", 7005)],
            ),
            range(0, 5460, vec![node("10.0.0.1", 7000), node("", 7003)]),
            range(5461, 9000, vec![node("10.0.0.2", 7001)]),
            range(9001, 10922, vec![node("10.0.0.2", 7001)]),
        ])
    }

    #[test]
    fn parses_cluster_slots_and_finds_masters() {
        let map = SlotMap::parse(&three_masters(), "10.0.0.9").unwrap();
        let at = |slot| map.master_of(slot).map(|n| n.port);
        assert_eq!(
            [at(0), at(5460), at(5461), at(10922), at(16383)],
            [Some(7000), Some(7000), Some(7001), Some(7001), Some(7002)]
        );
        let nodes: Vec<_> = map.nodes().into_iter().map(|n| (n.host, n.port)).collect();
        assert_eq!(nodes.len(), 5);
        assert!(
            nodes.contains(&("10.0.0.9".to_string(), 7003)),
            "empty host: {nodes:?}"
        );
        assert!(SlotMap::parse(&Value::Int(1), "h").is_none());
        assert!(
            SlotMap::parse(&Value::Array(vec![range(5, 3, vec![node("h", 1)])]), "h").is_none()
        );
    }

    #[test]
    fn groups_never_straddle_masters() {
        let map = SlotMap::parse(&three_masters(), "h").unwrap();
        let groups = map.groups();
        assert_eq!(groups.len(), usize::from(SLOTS));
        for (slot, &group) in groups.iter().enumerate() {
            let slot = slot as u16;
            assert_eq!(map.master_of(slot), map.master_of(group), "slot {slot}");
        }
        // One group per master, even for a master serving two ranges.
        let mut distinct = groups.clone();
        distinct.dedup();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct, [0, 5461, 10923]);
        // A slot served by nobody (a cluster without full coverage) gets a group of its own.
        let partial = SlotMap::parse(&Value::Array(vec![range(0, 99, vec![node("h", 1)])]), "h")
            .unwrap()
            .groups();
        assert_eq!(
            (partial[0], partial[99], partial[100], partial[16383]),
            (0, 0, 100, 100)
        );
    }

    #[test]
    fn same_masters_ignores_replicas() {
        let a = SlotMap::parse(&three_masters(), "h").unwrap();
        let promoted = Value::Array(vec![
            range(10923, 16383, vec![node("10.0.0.3", 7002)]),
            range(0, 5460, vec![node("10.0.0.4", 7003)]),
            range(5461, 9000, vec![node("10.0.0.2", 7001)]),
            range(9001, 10922, vec![node("10.0.0.2", 7001)]),
        ]);
        let b = SlotMap::parse(&promoted, "h").unwrap();
        assert!(!a.same_masters(&b), "a replica took over slots 0-5460");
        let mut c = a.clone();
        c.ranges[2].replicas.clear();
        assert!(a.same_masters(&c));
    }

    #[test]
    fn matches_redis_cluster_keyslot() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"somekey"), 11058);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }
}
