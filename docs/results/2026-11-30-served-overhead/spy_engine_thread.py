import collections, sys
for f in sys.argv[1:]:
    c = collections.Counter(); tot = 0
    for l in open(f).read().splitlines():
        st, n = l.rsplit(" ", 1); n = int(n)
        fr = st.split(";")
        if not fr[0].endswith("eagle-engine"): continue
        tot += n
        names = [x.split(" (")[0] for x in fr[1:]]
        if any("NativeDraft" in x for x in names): key = "draft"
        elif "NativeWeights._call" in names: key = "base forward"
        elif any("Queue.get" in x for x in names): key = "wait for requests"
        elif not names: key = "idle"
        else: key = "python: " + names[-1]
        c[key] += n
    print(f, tot)
    for k, v in c.most_common(10): print(f"  {100*v/tot:5.1f}% {k}")
