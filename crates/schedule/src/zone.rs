//! A time zone of the IANA database as chrono's `TimeZone`, for croner to search a pattern in.
//!
//! The database is jiff's bundled copy (`tzdb-bundle-always`): compiled into the binary as one
//! blob and parsed when a zone is first asked for, so it holds on any machine (no
//! `/usr/share/zoneinfo` needed) and costs nothing at start. (chrono-tz, which compiles every
//! zone into tables of pointers, added about a megabyte of relocated data that every start of
//! picogent touched, schedules or not.)
//!
//! Invariants, as chrono-tz behaves and croner expects:
//! - a local time in a gap (a spring-forward) has no offset (`MappedLocalTime::None`), and one in
//!   a fold (a fall-back) has two, the earlier first (`Ambiguous`);
//! - an offset knows its zone (`TimeZone::from_offset`), and shows as the zone's abbreviation
//!   then (`CET`, `CEST`).

use std::fmt;
use std::sync::Arc;

use chrono::{Datelike, FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Timelike};
use jiff::tz::AmbiguousOffset;

/// An IANA time zone.
#[derive(Clone, Debug)]
pub struct Zone {
    /// Its name as the database spells it (`Europe/Berlin`).
    name: Arc<str>,
    tz: jiff::tz::TimeZone,
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl Zone {
    /// The zone named `name` (the database matches names in any case); `None` when it has none.
    pub fn get(name: &str) -> Option<Zone> {
        let tz = jiff::tz::db().get(name.trim()).ok()?;
        let spelled = tz.iana_name().unwrap_or(name.trim()).into();
        Some(Zone { name: spelled, tz })
    }

    /// Its name as the database spells it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every zone name the database has.
    pub fn names() -> Vec<String> {
        jiff::tz::db().available().map(|name| name.as_str().to_string()).collect()
    }

    /// The zone's offset, and its abbreviation, at the instant `at`.
    fn offset_at(&self, at: jiff::Timestamp) -> ZoneOffset {
        let info = self.tz.to_offset_info(at);
        ZoneOffset { zone: self.clone(), fixed: fixed(info.offset()), abbreviation: info.abbreviation().into() }
    }

    /// The offset `offset` of this zone as it applies to the local time `local`.
    fn offset_for(&self, offset: jiff::tz::Offset, local: jiff::civil::DateTime) -> ZoneOffset {
        match offset.to_timestamp(local) {
            Ok(at) => self.offset_at(at),
            Err(_) => ZoneOffset { zone: self.clone(), fixed: fixed(offset), abbreviation: "".into() },
        }
    }
}

/// An offset of a [`Zone`], knowing its zone and its abbreviation.
#[derive(Clone, Debug)]
pub struct ZoneOffset {
    zone: Zone,
    fixed: FixedOffset,
    abbreviation: Box<str>,
}

impl Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

/// The zone's abbreviation then (`CET`), or the offset where the database has none.
impl fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.abbreviation.is_empty() {
            true => write!(f, "{}", self.fixed),
            false => f.write_str(&self.abbreviation),
        }
    }
}

impl TimeZone for Zone {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Zone {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> MappedLocalTime<ZoneOffset> {
        self.offset_from_local_datetime(&local.and_time(NaiveTime::MIN))
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<ZoneOffset> {
        let Some(civil) = civil(local) else { return MappedLocalTime::None };
        match self.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => MappedLocalTime::Single(self.offset_for(offset, civil)),
            AmbiguousOffset::Gap { .. } => MappedLocalTime::None,
            AmbiguousOffset::Fold { before, after } => {
                MappedLocalTime::Ambiguous(self.offset_for(before, civil), self.offset_for(after, civil))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        self.offset_from_utc_datetime(&utc.and_time(NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        // Outside jiff's range (years -9999 to 9999) the zone's offset at its edge stands in.
        let second =
            utc.and_utc().timestamp().clamp(jiff::Timestamp::MIN.as_second(), jiff::Timestamp::MAX.as_second());
        self.offset_at(jiff::Timestamp::from_second(second).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
    }
}

fn fixed(offset: jiff::tz::Offset) -> FixedOffset {
    FixedOffset::east_opt(offset.seconds()).unwrap_or_else(|| FixedOffset::east_opt(0).expect("0 is a valid offset"))
}

/// chrono's local time as jiff's; `None` outside jiff's years.
fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
    let year = i16::try_from(local.year()).ok()?;
    let narrow = |n: u32| i8::try_from(n).ok();
    jiff::civil::DateTime::new(
        year,
        narrow(local.month())?,
        narrow(local.day())?,
        narrow(local.hour())?,
        narrow(local.minute())?,
        narrow(local.second())?,
        0,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").unwrap()
    }

    #[test]
    fn a_zone_is_found_in_any_case_and_spelled_as_the_database_does() {
        assert_eq!(Zone::get("europe/berlin").unwrap().name(), "Europe/Berlin");
        assert_eq!(Zone::get("UTC").unwrap().name(), "UTC");
        assert!(Zone::get("Europe/Berln").is_none());
        assert!(Zone::get("").is_none());
        assert!(Zone::names().iter().any(|name| name == "America/New_York"));
    }

    #[test]
    fn gaps_have_no_offset_and_folds_two_the_earlier_first() {
        let berlin = Zone::get("Europe/Berlin").unwrap();
        // 2025-03-30 02:30 does not exist in Berlin; 2025-10-26 02:30 happens twice.
        assert!(matches!(berlin.offset_from_local_datetime(&local("2025-03-30 02:30")), MappedLocalTime::None));
        match berlin.offset_from_local_datetime(&local("2025-10-26 02:30")) {
            MappedLocalTime::Ambiguous(earlier, later) => {
                assert_eq!((earlier.fix().local_minus_utc(), later.fix().local_minus_utc()), (7200, 3600));
                assert_eq!((earlier.to_string(), later.to_string()), ("CEST".to_string(), "CET".to_string()));
            }
            other => panic!("{other:?}"),
        }
        let winter = berlin.offset_from_local_datetime(&local("2025-12-01 09:00")).single().unwrap();
        assert_eq!((winter.fix().local_minus_utc(), winter.to_string()), (3600, "CET".to_string()));
        assert_eq!(Zone::from_offset(&winter), berlin);
    }

    #[test]
    fn a_utc_time_gets_the_zones_offset_then() {
        let berlin = Zone::get("Europe/Berlin").unwrap();
        let summer = berlin.offset_from_utc_datetime(&local("2025-07-01 12:00"));
        assert_eq!((summer.fix().local_minus_utc(), summer.to_string()), (7200, "CEST".to_string()));
        let far = berlin.offset_from_utc_datetime(&local("9999-12-31 23:00"));
        assert_eq!(far.fix().local_minus_utc(), 3600);
    }
}
