import { Badge } from "@chakra-ui/react";

import { STATUS_PALETTE } from "./format";

export const StatusBadge = ({ status }: { status: string }) => (
  <Badge className="badge" colorPalette={STATUS_PALETTE[status] ?? "gray"} variant="solid" data-status={status}>
    {status}
  </Badge>
);
