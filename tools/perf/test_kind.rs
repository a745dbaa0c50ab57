//! perftest's five tests, as `perf --test` and the data-path bench name
//! them (shared by `tools/perf.rs` and `benches/datapath` through
//! `#[path]`, so the two cannot disagree on a name).

/// One of the five tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    WriteLat,
    SendLat,
    ReadLat,
    WriteBw,
    SendBw,
}

impl Test {
    pub const ALL: [Test; 5] = [
        Test::WriteLat,
        Test::SendLat,
        Test::ReadLat,
        Test::WriteBw,
        Test::SendBw,
    ];

    /// The name `perf --test` takes and the report uses.
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteLat => "write_lat",
            Test::SendLat => "send_lat",
            Test::ReadLat => "read_lat",
            Test::WriteBw => "write_bw",
            Test::SendBw => "send_bw",
        }
    }

    /// The test of `name`.
    pub fn parse(name: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == name)
    }

    /// A latency test (the rest measure bandwidth).
    pub fn is_lat(self) -> bool {
        matches!(self, Test::WriteLat | Test::SendLat | Test::ReadLat)
    }

    /// A test whose messages land in posted receives.
    pub fn uses_recv(self) -> bool {
        matches!(self, Test::SendLat | Test::SendBw)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_name_parses_back_and_nothing_else_does() {
        use super::Test;
        for t in Test::ALL {
            assert_eq!(Test::parse(t.name()), Some(t));
        }
        assert_eq!(Test::parse("write"), None);
        assert_eq!(Test::parse("ib_write_bw"), None);
    }
}
