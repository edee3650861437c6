// The OpenAPI document served at /docs and /docs-json: the API's title, its error shape and its
// three bearer schemes. Paths, bodies and response schemas come from the controllers' decorators
// and the DTO classes; openapi.spec.ts checks that every order and product answer has its schema.
import type { INestApplication } from '@nestjs/common';
import { DocumentBuilder, OpenAPIObject, SwaggerModule } from '@nestjs/swagger';

export function openApiDocument(app: INestApplication): OpenAPIObject {
  const doc = new DocumentBuilder()
    .setTitle('Flash-sale inventory service')
    .setDescription('Orders over segmented stock locks; errors are { statusCode, code, message }.')
    .setVersion('1')
    .addBearerAuth({ type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN, for /admin calls' }, 'admin')
    .addBearerAuth(
      { type: 'http', scheme: 'bearer', description: 'SHOP_TOKEN: pay, and read or cancel any order' },
      'shop',
    )
    .addBearerAuth(
      {
        type: 'http',
        scheme: 'bearer',
        bearerFormat: 'JWT',
        description: "a buyer's JWT (sub = the user), when BUYER_JWT_SECRET or BUYER_JWT_PUBLIC_KEY is set",
      },
      'buyer',
    )
    .build();
  return SwaggerModule.createDocument(app, doc);
}
