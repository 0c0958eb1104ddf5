//! PEM clients: consumers of the event stream while it is logged. The
//! recorder takes each complete packet from the buffer once and hands it to
//! every client: the trace writer is one client, an online analysis another
//! (`loupe trace record --live` prints events as they arrive).

use crate::buffer::{Buffer, PACKET_HEADER};
use crate::record::{decode_at, Record};
use crate::spec::Spec;

/// A consumer of the live stream.
pub trait Client {
    /// A packet as taken from the buffer (CTF header and context completed).
    fn packet(&mut self, _cpu: usize, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    /// Each record of the packet, in buffer order.
    fn record(&mut self, _cpu: usize, _rec: &Record) {}
    /// Whether [`Client::record`] is wanted (decoding costs time).
    fn wants_records(&self) -> bool {
        false
    }
}

/// Takes every complete packet of every CPU (closing open packets first when
/// `flush`) and hands it to the clients. Returns the packets taken; a record
/// that does not decode ends its packet for the record clients only.
pub fn pump(buf: &Buffer, spec: &Spec, clients: &mut [&mut dyn Client], flush: bool, scratch: &mut Vec<u8>) -> std::io::Result<u64> {
    let mut packets = 0;
    let decode = clients.iter().any(|c| c.wants_records());
    for cpu in 0..buf.geometry().ncpu as usize {
        if flush {
            buf.flush(cpu);
        }
        while buf.take(cpu, scratch) {
            crate::ctf::trim_content(spec, scratch);
            packets += 1;
            for c in clients.iter_mut() {
                c.packet(cpu, scratch)?;
            }
            if decode {
                let mut at = PACKET_HEADER;
                while let Ok(Some((rec, n))) = decode_at(spec, scratch, at) {
                    clients.iter_mut().filter(|c| c.wants_records()).for_each(|c| c.record(cpu, &rec));
                    at += n;
                }
            }
        }
    }
    Ok(packets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::Geometry;
    use crate::record::{encode, Value};

    struct Collect(Vec<(usize, u64)>, u64);
    impl Client for Collect {
        fn packet(&mut self, _: usize, _: &[u8]) -> std::io::Result<()> {
            self.1 += 1;
            Ok(())
        }
        fn record(&mut self, cpu: usize, r: &Record) {
            if let Value::U(it) = r.fields[1] {
                self.0.push((cpu, it));
            }
        }
        fn wants_records(&self) -> bool {
            true
        }
    }

    // A client sees every record logged, in order, once the packet is flushed; packets are counted.
    #[test]
    fn client_gets_records() {
        let spec = crate::spec::parse(&[(
            "t.xml",
            "<events name='t'><event name='A::B::C' description='d'><layerId value='A'/><classId value='B'/><specifier value='C'/></event></events>",
        )])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let buf = Buffer::create(&dir.path().join("b"), Geometry { ncpu: 2, nsub: 4, sub_size: 1 << 15 }).unwrap();
        let ev = spec.by_id(crate::spec::PHASE_BEGIN).unwrap();
        for i in 0..10u64 {
            let rec = encode(ev, 0, &[Value::U(3), Value::U(i)]);
            assert!(buf.log_on(1, rec.len(), |b, ts| {
                b.copy_from_slice(&rec);
                b[..8].copy_from_slice(&ts.to_le_bytes());
            }));
        }
        let mut c = Collect(Vec::new(), 0);
        let mut scratch = Vec::new();
        assert_eq!(pump(&buf, &spec, &mut [&mut c], false, &mut scratch).unwrap(), 0);
        assert_eq!(pump(&buf, &spec, &mut [&mut c], true, &mut scratch).unwrap(), 1);
        assert_eq!(c.0, (0..10).map(|i| (1, i)).collect::<Vec<_>>());
        assert_eq!(c.1, 1);
    }
}
