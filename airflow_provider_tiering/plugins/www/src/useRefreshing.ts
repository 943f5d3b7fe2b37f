// Data that reloads itself: loaded at once, then every few seconds while the page is visible; the last good data
// stays on screen when a reload fails, with the error beside it.
import { useCallback, useEffect, useRef, useState } from "react";

export const REFRESH_MS = 10_000;

export interface Refreshing<T> {
  data: T | undefined;
  error: Error | undefined;
  updatedAt: Date | undefined;
  reload: () => Promise<void>;
}

export function useRefreshing<T>(load: () => Promise<T>, key: string): Refreshing<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<Error>();
  const [updatedAt, setUpdatedAt] = useState<Date>();
  const current = useRef(key);
  current.current = key;

  const reload = useCallback(async () => {
    try {
      const loaded = await load();
      if (current.current !== key) return; // an answer for a view the user has left
      setData(loaded);
      setError(undefined);
      setUpdatedAt(new Date());
    } catch (err) {
      if (current.current === key) setError(err instanceof Error ? err : new Error(String(err)));
    }
  }, [key]); // ``load`` belongs to ``key``: a new view brings a new loader

  useEffect(() => {
    void reload();
    const timer = setInterval(() => {
      if (!document.hidden) void reload();
    }, REFRESH_MS);
    return () => clearInterval(timer);
  }, [reload]);

  return { data, error, updatedAt, reload };
}
