//! Listening TCP sockets from the kernel's `sock_diag` netlink interface (`inet_diag`, as `ss`
//! asks): one dump per address family, filtered to the LISTEN state in the kernel. The messages
//! are built and parsed as bytes, so no unsafe code is needed.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};
use nix::sys::time::TimeVal;
use sandbox_protocol::SocketProtocol;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const IPPROTO_TCP: u8 = 6;
const TCP_LISTEN: u32 = 10;
const HEADER: usize = 16;
/// `struct inet_diag_msg`: family, state, timer, retrans, the socket id (48 bytes), expires,
/// rqueue, wqueue, uid, inode.
const DIAG_MSG: usize = 72;

/// `(protocol, address, port, inode)` of every listening TCP socket of this network namespace.
pub(super) fn listening() -> io::Result<Vec<(SocketProtocol, String, u16, u64)>> {
    let mut found = Vec::new();
    for (family, protocol) in [(2u8, SocketProtocol::Tcp), (10u8, SocketProtocol::Tcp6)] {
        for (address, port, inode) in dump(family)? {
            found.push((protocol, address, port, inode));
        }
    }
    Ok(found)
}

fn request(family: u8) -> Vec<u8> {
    let mut message = Vec::with_capacity(HEADER + 56);
    message.extend_from_slice(&((HEADER + 56) as u32).to_ne_bytes());
    message.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    message.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    // struct inet_diag_req_v2: family, protocol, ext, pad, states, then a zeroed socket id.
    message.extend_from_slice(&[family, IPPROTO_TCP, 0, 0]);
    message.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    message.extend_from_slice(&[0u8; 48]);
    message
}

fn dump(family: u8) -> io::Result<Vec<(String, u16, u64)>> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    // Bounded: the kernel answers a dump at once; a stuck socket must not hold a call.
    nix::sys::socket::setsockopt(
        &fd,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &TimeVal::new(0, 500_000),
    )?;
    sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &request(family),
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    let mut found = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    // Bounded by the kernel's DONE message; a thousand reads is far more than any dump needs.
    for _ in 0..1000 {
        let n = recv(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &mut buffer,
            MsgFlags::empty(),
        )?;
        if n == 0 {
            break;
        }
        if parse(&buffer[..n], family, &mut found)? {
            return Ok(found);
        }
    }
    Err(io::Error::other("sock_diag: no end to the dump"))
}

/// Parses one datagram of netlink messages into `found`; true at the dump's end.
fn parse(mut bytes: &[u8], family: u8, found: &mut Vec<(String, u16, u64)>) -> io::Result<bool> {
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    while bytes.len() >= HEADER {
        let length = u32_at(bytes, 0) as usize;
        let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
        if length < HEADER || length > bytes.len() {
            return Err(io::Error::other("sock_diag: a truncated message"));
        }
        let body = &bytes[HEADER..length];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = if body.len() >= 4 {
                    u32_at(body, 0) as i32
                } else {
                    0
                };
                return Err(io::Error::from_raw_os_error(-errno));
            }
            SOCK_DIAG_BY_FAMILY if body.len() >= DIAG_MSG => {
                let port = u16::from_be_bytes([body[4], body[5]]);
                let address = if family == 2 {
                    Ipv4Addr::new(body[8], body[9], body[10], body[11]).to_string()
                } else {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&body[8..24]);
                    Ipv6Addr::from(octets).to_string()
                };
                found.push((address, port, u64::from(u32_at(body, 68))));
            }
            _ => {}
        }
        // Messages are aligned to 4 bytes.
        let next = (length + 3) & !3;
        bytes = bytes.get(next..).unwrap_or(&[]);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener this test opens is in the dump, with its inode, in both families.
    #[test]
    fn the_dump_finds_a_listener_with_its_inode() {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let v6 = std::net::TcpListener::bind("[::1]:0").ok();
        let found = listening().unwrap();
        let port = v4.local_addr().unwrap().port();
        let ours = found
            .iter()
            .find(|(protocol, address, p, _)| {
                *protocol == SocketProtocol::Tcp && address == "127.0.0.1" && *p == port
            })
            .unwrap_or_else(|| panic!("{port} not in {found:?}"));
        assert!(ours.3 > 0, "an inode: {ours:?}");
        if let Some(v6) = v6 {
            let port = v6.local_addr().unwrap().port();
            assert!(
                found.iter().any(
                    |(protocol, address, p, _)| *protocol == SocketProtocol::Tcp6
                        && address == "::1"
                        && *p == port
                ),
                "{found:?}"
            );
        }
    }

    #[test]
    fn a_truncated_answer_is_an_error_not_a_panic() {
        let mut found = Vec::new();
        let mut bytes = vec![0u8; 20];
        bytes[0..4].copy_from_slice(&200u32.to_ne_bytes());
        assert!(parse(&bytes, 2, &mut found).is_err());
        assert!(parse(&[0u8; 3], 2, &mut found).is_ok_and(|done| !done));
    }
}
