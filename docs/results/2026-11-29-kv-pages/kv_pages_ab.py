"""bench with each row twice: KV caches in huge pages (default) and in ordinary pages ('~4k' rows), one process."""
import sys
import eagle_trt.perf.bench_runtime as br
import eagle_trt.runtime as rt
from eagle_trt.runtime.model import KVCache

order = []
orig_settings = br._settings
def settings(cfg, echo, progress):
    out, tunings = orig_settings(cfg, echo, progress)
    both = dict(out)
    for name, v in out.items():
        both[name + "~4k"] = v
    order.extend(both)
    return both, tunings
br._settings = settings

orig_load = rt.EagleDecoder.load.__func__
def load(cls, *a, **k):
    name = order.pop(0) if order else "(tuner)"
    KVCache.__init__.__defaults__ = (not name.endswith("~4k"),)
    print("loading", name, "huge" if KVCache.__init__.__defaults__[0] else "ordinary", flush=True)
    try:
        return orig_load(cls, *a, **k)
    finally:
        KVCache.__init__.__defaults__ = (True,)
rt.EagleDecoder.load = classmethod(load)

from eagle_trt.cli import main
if __name__ == "__main__":
    sys.argv = ["eagle-trt"] + sys.argv[1:]
    main()
