import { Badge } from "@chakra-ui/react";

/** Airflow's palette for a status (its task-state colours, light and dark). */
const STATUS_PALETTE: Record<string, string> = {
  NEW: "none",
  INITIALIZED: "scheduled",
  SCHEDULED: "scheduled",
  PENDING: "queued",
  TIERING: "running",
  TIERED: "success",
  FAILED: "failed",
};

export const StatusBadge = ({ status }: { status: string }) => (
  <Badge className="badge" colorPalette={STATUS_PALETTE[status] ?? "gray"} variant="solid" data-status={status}>
    {status}
  </Badge>
);
