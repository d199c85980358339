"""Read a Prometheus text exposition on stdin with the reference parser
(python3-prometheus-client) and print what it understood, one line each:
    family NAME TYPE HELP-IN-HEX
    sample NAME LABEL=HEX,LABEL=HEX VALUE
Label values and help texts are hex-encoded UTF-8, so that nothing in
them can be mistaken for the layout.  A text the parser refuses makes
it exit with status 1 and the parser's message."""
import sys

from prometheus_client.parser import text_string_to_metric_families


def hexed(s):
    return s.encode("utf-8").hex()


def main():
    text = sys.stdin.buffer.read().decode("utf-8")
    try:
        for family in text_string_to_metric_families(text):
            print("family", family.name, family.type,
                  hexed(family.documentation))
            for s in family.samples:
                labels = ",".join("%s=%s" % (k, hexed(v))
                                  for k, v in sorted(s.labels.items()))
                print("sample", s.name, labels or "-", repr(s.value))
    except Exception as e:  # the parser's own message is the point
        print("parse error: %s: %s" % (type(e).__name__, e))
        sys.exit(1)


main()
