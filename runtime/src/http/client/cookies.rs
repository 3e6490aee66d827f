//! [`CookieJar`]: the cookies a remote ACP server sets, kept and sent back as the RFD requires
//! ("Clients MUST accept, store, and return cookies set by the server", for session affinity
//! behind load balancers).
//!
//! Deliberately small, like the official TypeScript client's jar: a cookie is a name and a
//! value, kept per server (host and port) and sent back to that server only. `Max-Age` and
//! `Expires` are honoured (zero, negative or past means delete; a future one expires the
//! cookie then; `Max-Age` wins over `Expires`). `Path`, `Domain`, `Secure`, `HttpOnly` and
//! `SameSite` are ignored: the jar serves one ACP endpoint, not a browser. A server gets at
//! most [`MAX_COOKIES_PER_SERVER`] cookies of up to [`MAX_COOKIE_BYTES`] each (RFC 6265's
//! minimums for a user agent): beyond, new ones are not kept, so a server cannot make the
//! client's memory or its `Cookie` header grow without bound.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most cookies kept for one server.
pub(crate) const MAX_COOKIES_PER_SERVER: usize = 50;
/// The largest cookie kept, name and value together, in bytes.
pub(crate) const MAX_COOKIE_BYTES: usize = 4096;

/// Cookies set by remote servers, shared by every clone: give a reconnecting client the jar
/// of the connection it replaces ([`Remote::cookie_jar`](super::Remote::cookie_jar)) and its
/// requests carry the same cookies, so a sticky load balancer sends it to the same backend.
/// A server gets at most 50 cookies of up to 4096 bytes each (name and value); beyond, new
/// ones are not kept.
#[derive(Clone, Debug, Default)]
pub struct CookieJar {
    servers: Arc<Mutex<HashMap<String, BTreeMap<String, Cookie>>>>,
}

#[derive(Clone, Debug)]
struct Cookie {
    value: String,
    expires: Option<SystemTime>,
}

impl CookieJar {
    /// An empty jar.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one `Set-Cookie` header value sent by `server` (its `host:port`).
    pub fn store(&self, server: &str, set_cookie: &str) {
        self.store_at(server, set_cookie, SystemTime::now());
    }

    pub(crate) fn store_at(&self, server: &str, set_cookie: &str, now: SystemTime) {
        let mut parts = set_cookie.split(';');
        let Some((name, value)) = parts.next().and_then(|pair| pair.split_once('=')) else { return };
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        let value = value.trim();
        let mut max_age = None;
        let mut expires = None;
        for attribute in parts {
            let (key, val) = attribute.split_once('=').unwrap_or((attribute, ""));
            let key = key.trim();
            if key.eq_ignore_ascii_case("max-age") {
                // RFC 6265 §5.2.2: digits with an optional leading `-`; anything else is ignored.
                let val = val.trim();
                let digits = val.strip_prefix('-').unwrap_or(val);
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    max_age = Some(if val.starts_with('-') { -1 } else { digits.parse::<i64>().unwrap_or(i64::MAX) });
                }
            } else if key.eq_ignore_ascii_case("expires") {
                expires = parse_cookie_date(val);
            }
        }
        let expiry = match (max_age, expires) {
            (Some(seconds), _) if seconds <= 0 => Some(UNIX_EPOCH),
            (Some(seconds), _) => Some(now.checked_add(Duration::from_secs(seconds as u64)).unwrap_or(far_future())),
            (None, expires) => expires,
        };
        let mut servers = self.lock();
        let cookies = servers.entry(server.to_ascii_lowercase()).or_default();
        if expiry.is_some_and(|at| at <= now) {
            cookies.remove(name);
        } else if name.len() + value.len() > MAX_COOKIE_BYTES {
            tracing::debug!(server, name, "acp http client: cookie larger than 4096 bytes not kept");
        } else {
            if cookies.len() >= MAX_COOKIES_PER_SERVER && !cookies.contains_key(name) {
                cookies.retain(|_, cookie| cookie.expires.is_none_or(|at| at > now));
                if cookies.len() >= MAX_COOKIES_PER_SERVER {
                    tracing::debug!(server, name, "acp http client: cookie beyond the server's 50 not kept");
                    return;
                }
            }
            cookies.insert(name.to_owned(), Cookie { value: value.to_owned(), expires: expiry });
        }
    }

    /// The `Cookie` header to send to `server` (its `host:port`): `name=value` pairs joined
    /// with `; `, or `None` when it has set none (or they have expired).
    pub fn header_for(&self, server: &str) -> Option<String> {
        self.header_at(server, SystemTime::now())
    }

    pub(crate) fn header_at(&self, server: &str, now: SystemTime) -> Option<String> {
        let mut servers = self.lock();
        let cookies = servers.get_mut(&server.to_ascii_lowercase())?;
        cookies.retain(|_, cookie| cookie.expires.is_none_or(|at| at > now));
        let header =
            cookies.iter().map(|(name, cookie)| format!("{name}={}", cookie.value)).collect::<Vec<_>>().join("; ");
        (!header.is_empty()).then_some(header)
    }

    /// The value of cookie `name` set by `server` (its `host:port`), if it is kept.
    pub fn get(&self, server: &str, name: &str) -> Option<String> {
        let now = SystemTime::now();
        let servers = self.lock();
        let cookie = servers.get(&server.to_ascii_lowercase())?.get(name)?;
        cookie.expires.is_none_or(|at| at > now).then(|| cookie.value.clone())
    }

    /// Forgets every cookie.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, BTreeMap<String, Cookie>>> {
        self.servers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn far_future() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(253_402_300_799) // 9999-12-31T23:59:59Z
}

/// Parses an `Expires` date the lenient way RFC 6265 §5.1.1 describes, which reads the
/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 ...`) and
/// asctime (`Sun Nov  6 08:49:37 1994`) forms alike. `None` for a date it cannot read (the
/// attribute is then ignored, as the RFC says).
pub(crate) fn parse_cookie_date(text: &str) -> Option<SystemTime> {
    let delimiter = |c: char| {
        let b = c as u32;
        b == 0x09
            || (0x20..=0x2F).contains(&b)
            || (0x3B..=0x40).contains(&b)
            || (0x5B..=0x60).contains(&b)
            || (0x7B..=0x7E).contains(&b)
    };
    let (mut time, mut day, mut month, mut year) = (None, None, None, None);
    for token in text.split(delimiter).filter(|t| !t.is_empty()) {
        if time.is_none() && parse_time(token).is_some() {
            time = parse_time(token);
        } else if day.is_none() && leading_digits(token, 1, 2).is_some() {
            day = leading_digits(token, 1, 2);
        } else if month.is_none() && month_of(token).is_some() {
            month = month_of(token);
        } else if year.is_none() && leading_digits(token, 2, 4).is_some() {
            year = leading_digits(token, 2, 4);
        }
    }
    let (hour, minute, second) = time?;
    let (day, month, mut year) = (day?, month?, year?);
    if (70..=99).contains(&year) {
        year += 1900;
    } else if year <= 69 {
        year += 2000;
    }
    if !(1..=31).contains(&day) || year < 1601 || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year as i64, month, day);
    let seconds = days * 86_400 + (hour * 3600 + minute * 60 + second) as i64;
    if seconds >= 0 {
        Some(UNIX_EPOCH + Duration::from_secs(seconds as u64))
    } else {
        Some(UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs()))
    }
}

/// `hh:mm:ss` (one or two digits each, anything after the seconds' digits ignored).
fn parse_time(token: &str) -> Option<(u32, u32, u32)> {
    let mut fields = token.splitn(3, ':');
    let hour = fields.next().and_then(|f| all_digits(f, 1, 2))?;
    let minute = fields.next().and_then(|f| all_digits(f, 1, 2))?;
    let second = fields.next().and_then(|f| leading_digits(f, 1, 2))?;
    Some((hour, minute, second))
}

fn all_digits(text: &str, min: usize, max: usize) -> Option<u32> {
    (text.len() >= min && text.len() <= max && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok())?
}

/// `min..=max` digits at the start of `text`, not followed by another digit.
fn leading_digits(text: &str, min: usize, max: usize) -> Option<u32> {
    let count = text.bytes().take_while(u8::is_ascii_digit).count();
    (count >= min && count <= max).then(|| text[..count].parse().ok())?
}

fn month_of(token: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let prefix = token.get(..3)?.to_ascii_lowercase();
    MONTHS.iter().position(|m| *m == prefix).map(|i| i as u32 + 1)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = month as i64;
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day as i64 - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "127.0.0.1:8080";

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn a_server_gets_a_bounded_number_of_bounded_cookies() {
        let jar = CookieJar::new();
        let now = SystemTime::now();
        for n in 0..MAX_COOKIES_PER_SERVER + 10 {
            jar.store_at(SERVER, &format!("c{n}=v"), now);
        }
        jar.store_at(SERVER, &format!("big={}", "x".repeat(MAX_COOKIE_BYTES)), now);
        let header = jar.header_for(SERVER).unwrap();
        assert_eq!(header.split("; ").count(), MAX_COOKIES_PER_SERVER);
        assert!(!header.contains("big="));
        // A cookie already kept is still updated, and one deleted makes room.
        jar.store_at(SERVER, "c0=new", now);
        jar.store_at(SERVER, "c1=gone; Max-Age=0", now);
        jar.store_at(SERVER, "late=1", now);
        let header = jar.header_for(SERVER).unwrap();
        assert!(header.contains("c0=new") && header.contains("late=1") && !header.contains("c1="), "{header}");
        // Another server has room of its own.
        jar.store_at("other:1", "c=1", now);
        assert_eq!(jar.header_for("other:1").as_deref(), Some("c=1"));
    }

    #[test]
    fn keeps_name_and_value_and_sends_them_back() {
        let jar = CookieJar::new();
        assert_eq!(jar.header_for(SERVER), None);
        jar.store(SERVER, "affinity=node-1; Path=/; HttpOnly; SameSite=Lax");
        jar.store(SERVER, "  lb = a=b ; Secure");
        assert_eq!(jar.get(SERVER, "affinity").as_deref(), Some("node-1"));
        assert_eq!(jar.get(SERVER, "lb").as_deref(), Some("a=b"));
        assert_eq!(jar.header_for(SERVER).as_deref(), Some("affinity=node-1; lb=a=b"));
        // A new value replaces the old one.
        jar.store(SERVER, "affinity=node-2");
        assert_eq!(jar.header_for(SERVER).as_deref(), Some("affinity=node-2; lb=a=b"));
        // Per server, the host compared without case.
        assert_eq!(jar.header_for("127.0.0.1:9090"), None);
        jar.store("Example.COM:80", "x=1");
        assert_eq!(jar.header_for("example.com:80").as_deref(), Some("x=1"));
        // Clones share the jar.
        let shared = jar.clone();
        shared.clear();
        assert_eq!(jar.header_for(SERVER), None);
    }

    #[test]
    fn malformed_cookies_are_ignored() {
        let jar = CookieJar::new();
        for bad in ["", "novalue", "=x", " =x; Path=/", ";a=b"] {
            jar.store(SERVER, bad);
        }
        assert_eq!(jar.header_for(SERVER), None);
        // An empty value is a value.
        jar.store(SERVER, "empty=");
        assert_eq!(jar.header_for(SERVER).as_deref(), Some("empty="));
    }

    #[test]
    fn max_age_and_expires_delete_or_expire() {
        let jar = CookieJar::new();
        let now = at(1_000_000_000);
        for name in ["a", "b", "c", "d"] {
            jar.store_at(SERVER, &format!("{name}=1"), now);
        }
        jar.store_at(SERVER, "a=; Max-Age=0", now);
        jar.store_at(SERVER, "b=x; max-age=-5", now);
        jar.store_at(SERVER, "c=x; Expires=Thu, 01 Jan 1970 00:00:00 GMT", now);
        // Max-Age wins over a past Expires; an unreadable Max-Age is ignored.
        jar.store_at(SERVER, "d=2; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=60", now);
        jar.store_at(SERVER, "e=3; Max-Age=soon", now);
        assert_eq!(jar.header_at(SERVER, now).as_deref(), Some("d=2; e=3"));
        // `d` expires 60 s later.
        assert_eq!(jar.header_at(SERVER, at(1_000_000_061)).as_deref(), Some("e=3"));
        // A future Expires keeps it until then.
        jar.store_at(SERVER, "f=4; Expires=Sun, 09 Sep 2001 01:46:50 GMT", now);
        assert_eq!(jar.header_at(SERVER, at(1_000_000_009)).as_deref(), Some("e=3; f=4"));
        assert_eq!(jar.header_at(SERVER, at(1_000_000_010)).as_deref(), Some("e=3"));
    }

    #[test]
    fn reads_the_date_forms_servers_send() {
        let expected = Some(at(784_111_777)); // 1994-11-06T08:49:37Z
        assert_eq!(parse_cookie_date("Sun, 06 Nov 1994 08:49:37 GMT"), expected);
        assert_eq!(parse_cookie_date("Sunday, 06-Nov-94 08:49:37 GMT"), expected);
        assert_eq!(parse_cookie_date("Sun Nov  6 08:49:37 1994"), expected);
        assert_eq!(parse_cookie_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(UNIX_EPOCH));
        assert_eq!(parse_cookie_date("Wed, 21 Oct 2015 07:28:00 GMT"), Some(at(1_445_412_480)));
        assert_eq!(parse_cookie_date("Tue, 29 Feb 2000 12:00:00 GMT"), Some(at(951_825_600)));
        // Before the epoch still reads (and is in the past).
        assert!(parse_cookie_date("Fri, 01 Jan 1960 00:00:00 GMT").unwrap() < UNIX_EPOCH);
        for bad in ["", "tomorrow", "Sun, 06 Nov 1994", "Sun, 32 Nov 1994 08:49:37 GMT", "06 Foo 1994 08:49:37"] {
            assert_eq!(parse_cookie_date(bad), None, "{bad}");
        }
    }
}
