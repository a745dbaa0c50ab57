//! Lists the RDMA devices (or one), each port's state, link layer and
//! active MTU, and the GID table: `ibv_devinfo` in short. Run it with
//! `cargo run --example devinfo -- [--device rxe0]`, or in a VM on rxe0 and
//! siw0 with `cargo vm demo`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    use lexopt::prelude::*;
    let (mut only, mut args) = (None::<String>, lexopt::Parser::from_env());
    while let Some(arg) = args.next()? {
        match arg {
            Long("device") => only = Some(args.value()?.string()?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let mut devices = uverbs::devices()?; // one per /dev/infiniband/uverbsN
    devices.retain(|d| only.as_ref().map_or(true, |name| name == d.name()));
    for device in &devices {
        let (ctx, name) = (device.open()?, device.name());
        let ports = ctx.query_device()?.phys_port_cnt;
        println!("{name}: {ports} port(s)");
        for port in 1..=ports {
            let p = ctx.query_port(port)?; // ports count from 1
            let mtu = p.active_mtu_bytes().map_or("?".into(), |b| b.to_string());
            println!("  port {port}: {:?} {:?}, MTU {mtu}", p.state, p.link_layer);
        }
        for e in ctx.query_gid_table()? {
            // Valid entries only; on RoCE one per IP address of the netdev.
            let (gid, kind) = (e.gid, e.gid_type);
            println!("  gid {}/{}: {gid} {kind:?}", e.port_num, e.gid_index);
        }
    }
    if devices.is_empty() {
        return Err(format!("no RDMA device {}", only.as_deref().unwrap_or("at all")).into());
    }
    println!("devinfo: {} device(s) listed", devices.len());
    Ok(())
}
