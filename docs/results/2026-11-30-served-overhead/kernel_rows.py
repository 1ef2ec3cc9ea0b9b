"""ef_linear per row count on the demo base's Q4_1 linears (native-q8, one thread): ns per 16x32 unit per row."""
import ctypes, time, torch, sys
torch.set_num_threads(1)
from eagle_trt.demo_model import materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
dec = EagleDecoder.load(materialize_demo_gguf_base(), shipped_draft_dir(), tree="chain:1", dtype="native-q8", max_seq_len=2048)
nat = dec.base.native  # NativeForward: the C side's layers and the kernel library
lib = nat.lib
L = nat.layers[0]
print("types", L.up.type, L.q.type, L.down.type, L.up.rows, L.up.cols)
for name in ("up", "down", "q"):
    lin = getattr(L, name)
    units = lin.rows // 16 * lin.cols // 32
    for T in (1, 2, 4, 8, 16):
        x = torch.randn(T, lin.cols); y = torch.empty(T, lin.rows)
        args = (ctypes.byref(lin), T, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
        for _ in range(20): lib.ef_linear(*args)
        n = 400; t0 = time.perf_counter()
        for _ in range(n): lib.ef_linear(*args)
        dt = (time.perf_counter() - t0) / n
        print(f"{name} T={T}: {dt*1e6:.1f} us, per row-unit {dt/(units*T)*1e9:.2f} ns ({dt/(units*T)*3.0e9:.1f} cyc@3GHz)")
# all layers streamed: each linear of each layer once, T rows
for T in (1, 2, 4, 8):
    xs = {}
    tot = 0.0
    for rep in range(3):
        t0 = time.perf_counter()
        for Ly in nat.layers:
            for name in ("q","k","v","o","gate","up","down"):
                lin = getattr(Ly, name)
                x = xs.get((lin.cols, T))
                if x is None: x = xs[(lin.cols, T)] = torch.randn(T, lin.cols)
                y = xs.get(("y", lin.rows, T))
                if y is None: y = xs[("y", lin.rows, T)] = torch.empty(T, lin.rows)
                lib.ef_linear(ctypes.byref(lin), T, ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()))
        tot = time.perf_counter() - t0
    print(f"all layers T={T}: {tot*1e3:.2f} ms")
