import { Code } from "@chakra-ui/react";

/** An error's whole text, as text (never markup): red while it is the table's problem now, grey once past. */
export const ErrorText = ({ text, current = false }: { text: string; current?: boolean }) => (
  <Code
    className="error-full"
    as="pre"
    display="block"
    whiteSpace="pre-wrap"
    p={2}
    fontSize="xs"
    colorPalette={current ? "red" : "gray"}
  >
    {text}
  </Code>
);
