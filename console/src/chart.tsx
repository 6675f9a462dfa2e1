import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

/**
 * One uPlot time series chart. The numbers are also given as text beside it (the latest point),
 * since a canvas says nothing to a screen reader.
 */
export function Chart(props: { title: string; series: { label: string; points: [number, number][]; color: string }[]; unit: string }) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const first = props.series[0]?.points ?? [];
  const data: uPlot.AlignedData = [first.map((p) => p[0] / 1000), ...props.series.map((s) => s.points.map((p) => p[1]))];

  useEffect(() => {
    const el = host.current!;
    const width = () => Math.max(260, Math.min(el.clientWidth || 600, 900));
    plot.current = new uPlot({
      width: width(), height: 200, title: props.title,
      series: [{}, ...props.series.map((s) => ({ label: s.label, stroke: s.color, width: 2, value: (_u: uPlot, v: number | null) => (v === null ? '-' : `${v} ${props.unit}`) }))],
      axes: [{}, { size: 60 }],
    }, data, el);
    const ro = new ResizeObserver(() => plot.current?.setSize({ width: width(), height: 200 }));
    ro.observe(el);
    return () => { ro.disconnect(); plot.current?.destroy(); plot.current = null; };
  }, []);
  useEffect(() => { plot.current?.setData(data); }, [JSON.stringify(data)]);

  return (
    <figure class="chart">
      <div ref={host} role="img" aria-label={`${props.title} chart`} />
      <figcaption>
        {props.series.map((s) => (
          <span key={s.label} class="latest">{s.label}, latest 5 minutes: <strong data-latest={s.label}>{s.points.at(-1)?.[1] ?? 0}</strong> {props.unit}</span>
        ))}
      </figcaption>
    </figure>
  );
}
