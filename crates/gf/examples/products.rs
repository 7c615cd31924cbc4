//! Products of the dyadic program of each Cauchy shape against the dense k x m.
//! Usage: products K+M ...
use stripeguard_gf::dyadic::{cauchy_function, DyadicProgram};

fn main() {
    let h = cauchy_function();
    for arg in std::env::args().skip(1) {
        let (k, m) = arg.split_once('+').expect("K+M");
        let (k, m): (usize, usize) = (k.parse().expect("K"), m.parse().expect("M"));
        let rows: Vec<usize> = (k..k + m).collect();
        let cols: Vec<usize> = (0..k).collect();
        for (layout, p) in [
            (
                "recursive",
                Some(DyadicProgram::recursive(&h, &rows, &cols, false)),
            ),
            ("cross", DyadicProgram::cross(&h, &rows, &cols, false)),
        ] {
            let Some(p) = p else { continue };
            println!(
                "{k}+{m} {layout:9}: {} products of {} dense ({:.2}), cost {} of {} dense, scratch {} B",
                p.products(),
                k * m,
                p.products() as f64 / (k * m) as f64,
                p.cost(),
                2 * k * m,
                p.scratch_bytes()
            );
        }
    }
}
