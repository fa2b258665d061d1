"""Summary statistics for every numeric column of a CSV file.

Usage: python3 -u stats.py --in /in/input.csv --out /out/stats.json
"""
import argparse
import csv
import json
import statistics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--in", dest="src", required=True)
    parser.add_argument("--out", dest="dst", required=True)
    args = parser.parse_args()

    columns: dict[str, list[float]] = {}
    with open(args.src, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                try:
                    columns.setdefault(key, []).append(float(value))
                except (TypeError, ValueError):
                    pass

    summary = {
        name: {
            "count": len(values),
            "mean": statistics.fmean(values),
            "median": statistics.median(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values),
            "max": max(values),
        }
        for name, values in columns.items()
        if values
    }
    with open(args.dst, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
    print(f"summarised {len(summary)} numeric columns")


if __name__ == "__main__":
    main()
